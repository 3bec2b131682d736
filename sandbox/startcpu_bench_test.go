package sandbox

import (
	"testing"
	"time"
)

// BenchmarkReadyProcess starts a session process and loads the base interpreter into it,
// as the pool makes a ready process for a new conversation, then stops it: what every new
// conversation costs the node once the pool is drained. cpu-ms is the CPU time (user and
// system, clock ticks) of the process's tasks, the figure a burst divides the cores by.
func BenchmarkReadyProcess(b *testing.B) {
	e := defaultsEngine(b, "ready", func(cfg *Config) { cfg.WarmPool, cfg.WarmPoolMax, cfg.WarmSpares = 0, 0, 0 })
	p := e.pool
	var cpu time.Duration
	for b.Loop() {
		pr, err := p.make(true)
		if err != nil {
			b.Fatal(err)
		}
		if pr.CgroupDir() == "" {
			b.Skip("needs the session's cgroup")
		}
		cpu += time.Duration(cpuTicks(pr.Tasks())) * 10 * time.Millisecond
		pr.Close("bench")
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
