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
	rdb := testRedis(b)
	prefix := randomPrefix("ready")
	cleanPrefix(b, rdb, prefix)
	cfg := DefaultConfig()
	cfg.RedisPrefix, cfg.PackageCDN = prefix, CDNOff
	cfg.WarmPool, cfg.WarmPoolMax, cfg.WarmSpares = 0, 0, 0
	cfg = Locate(cfg)
	e := startEngine(b, cfg, rdb)
	p := newPool(e)
	var cpu time.Duration
	for b.Loop() {
		pr, err := p.make(true)
		if err != nil {
			b.Fatal(err)
		}
		if pr.cg == nil {
			b.Skip("needs the session's cgroup")
		}
		cpu += time.Duration(cpuTicks(pr.cg.pids())) * 10 * time.Millisecond
		pr.close("bench")
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
