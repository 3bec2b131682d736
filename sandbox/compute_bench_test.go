package sandbox

import (
	"context"
	"testing"
)

// BenchmarkCompute runs pure-Python loops in a new conversation, four times each: how
// fast a session computes as V8 moves the interpreter's hot wasm functions from Liftoff
// to TurboFan (v8Flags in internal/proc). first-ms is the first run's execution time,
// hot-ms the fourth's; the op is the four runs, a new session's first included.
func BenchmarkCompute(b *testing.B) {
	e := defaultsEngine(b, "compute", func(*Config) {})
	cells := []struct{ name, code string }{
		{"short", "s = 0\nfor i in range(100000):\n    s += i * i\n"},                                      // ~30-100 ms
		{"long", "d = {}\nfor i in range(1500000):\n    d[i % 1000] = d.get(i % 1000, 0) + len(str(i))\n"}, // ~1 s
	}
	for _, c := range cells {
		b.Run(c.name, func(b *testing.B) {
			var first, hot int64
			next := freshSessions(b, e, "compute:"+c.name)
			for b.Loop() {
				key := next()
				for run := range 4 {
					r, err := e.Execute(context.Background(), key, Request{Code: c.code})
					if err != nil || r.Status != StatusSuccess {
						b.Fatalf("run %d: %v %+v", run, err, r.Error)
					}
					switch run {
					case 0:
						first += r.ExecutionMS
					case 3:
						hot += r.ExecutionMS
					}
				}
			}
			b.ReportMetric(float64(first)/float64(b.N), "first-ms")
			b.ReportMetric(float64(hot)/float64(b.N), "hot-ms")
		})
	}
}
