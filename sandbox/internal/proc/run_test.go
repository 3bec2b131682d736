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

// TestAwaitAwake: the answer is taken when it comes, and waited for no less than the
// time counted.
func TestAwaitAwake(t *testing.T) {
	start := time.Now()
	if _, ok := awaitAwake(nil, 300*time.Millisecond); ok {
		t.Fatal("an answer that never came was taken")
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("gave up after %v, before the 300 ms it counts", d)
	}
	done := make(chan RunEnd, 1)
	done <- RunEnd{Started: true}
	if end, ok := awaitAwake(done, time.Hour); !ok || !end.Started {
		t.Fatalf("the answer that came: %+v, %v", end, ok)
	}
}
