package testenv

import (
	"testing"
	"time"
)

// Eventually polls fn until it holds, failing the test with what when within has passed
// first; it returns how long fn took to hold. It is the suite's one polling helper: a
// test waits for a state, never for a fixed time.
func Eventually(t testing.TB, within time.Duration, what string, fn func() bool) time.Duration {
	t.Helper()
	took, ok := Poll(within, fn)
	if !ok {
		t.Fatalf("%s: not within %s", what, within)
	}
	return took
}

// Poll calls fn until it returns true or within has passed, at first every millisecond
// and then less often (up to every 50 ms), and says how long it took and whether fn held.
func Poll(within time.Duration, fn func() bool) (took time.Duration, ok bool) {
	start := time.Now()
	wait := time.Millisecond
	for !fn() {
		if time.Since(start) > within {
			return time.Since(start), false
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
	return time.Since(start), true
}
