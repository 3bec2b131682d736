package sandbox

import (
	"context"
	"strings"
	"testing"
)

// TestMemoryWithinTheCap: Python may use what the session was granted and the session
// still saves; past it Python gets MemoryError; and neither grows the saved state for
// good.
func TestMemoryWithinTheCap(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, nil)
	ctx := context.Background()
	cases := []struct{ name, code, want string }{
		{"a 200 MiB string", "a = 'x' * (200 * 1024 * 1024)\nlen(a)", "209715200"},
		{"a list of 100M items", "try:\n    a = [0] * (100 * 1024 * 1024)\n    r = len(a)\nexcept MemoryError:\n    r = 'MemoryError'\nr", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "mem:" + c.name
			mustSucceed(t, e, key, "keep = 'still here'")
			small := checkpointNow(t, e, key).StateBytes
			r := run(t, e, key, c.code)
			if r.Status != StatusSuccess {
				t.Fatalf("status %s error %+v: within the cap a run succeeds or raises MemoryError", r.Status, r.Error)
			}
			if got := resultOf(r); c.want != "" && got != c.want || c.want == "" && got != "104857600" && got != "'MemoryError'" {
				t.Fatalf("result %s", got)
			}
			info := checkpointNow(t, e, key)
			if !info.Live {
				t.Fatal("the session's process did not survive its checkpoint")
			}
			mustSucceed(t, e, key, "del a\nimport gc; gc.collect()")
			evictLive(t, e, key)
			r = mustSucceed(t, e, key, "keep")
			if resultOf(r) != "'still here'" {
				t.Fatalf("after eviction: %s", resultOf(r))
			}
			info, err := e.Session(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("state: %d bytes before, %d after (mode %s)", small, info.StateBytes, info.Mode)
			if strings.Contains(r.Stderr, "memory limit") {
				t.Fatalf("stderr %q", r.Stderr)
			}
		})
	}
}
