package proc

import (
	"testing"
	"time"
)

// TestAwakeSkipsWhatStoodStill: a grace counts the steps the server ran; a step over a
// second (the server stood still) counts as one step, whatever its length.
func TestAwakeSkipsWhatStoodStill(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := awake{last: t0}
	grace := 3 * time.Second
	for _, s := range []struct {
		at, ran int // ms: when the server looked at the clock, what is counted then
	}{
		{100, 100},
		{900, 900},    // a late step of 800 ms counts whole
		{10900, 1000}, // 10 s standing still counts as one step
		{11900, 2000}, // a step of a second is not standing still
		{12800, 2900},
		{12900, 3000}, // the grace is over
	} {
		spent := a.add(t0.Add(time.Duration(s.at)*time.Millisecond), grace)
		if a.ran != time.Duration(s.ran)*time.Millisecond || spent != (s.ran >= 3000) {
			t.Fatalf("at %d ms: counted %v (over: %v), want %d ms", s.at, a.ran, spent, s.ran)
		}
	}
}

// TestAwakeFor: the channel closes once the time has passed, and not when stopped first.
func TestAwakeFor(t *testing.T) {
	start := time.Now()
	<-awakeFor(300*time.Millisecond, nil)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("closed after %v, before the 300 ms it counts", d)
	}
	stop := make(chan struct{})
	c := awakeFor(200*time.Millisecond, stop)
	close(stop)
	<-awakeFor(600*time.Millisecond, nil)
	select {
	case <-c:
		t.Fatal("closed although stopped")
	default:
	}
}
