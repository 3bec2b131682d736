package sandbox

import (
	"testing"
	"time"
)

// BenchmarkReadyProcess starts a session process and loads the base interpreter into it,
// as the pool makes a ready process for a new conversation, then stops it: what every new
// conversation costs the node once the pool is drained. cpu-ms is the CPU time (user and
// system, clock ticks) of the process's tasks, the figure a burst divides the cores by;
// sys-ms the kernel's share of it, faults its minor page faults (each a first touch of a
// page, which this kind of VM makes costly).
func BenchmarkReadyProcess(b *testing.B) {
	e := defaultsEngine(b, "ready", func(cfg *Config) { cfg.WarmPool, cfg.WarmPoolMax, cfg.WarmSpares = 0, 0, 0 })
	p := e.pool
	var sum taskStat
	for b.Loop() {
		pr, err := p.make(true)
		if err != nil {
			b.Fatal(err)
		}
		if pr.CgroupDir() == "" {
			b.Skip("needs the session's cgroup")
		}
		st := taskStats(pr.Tasks())
		sum.faults, sum.user, sum.sys = sum.faults+st.faults, sum.user+st.user, sum.sys+st.sys
		pr.Close("bench")
	}
	tick := float64(10*time.Millisecond) / float64(time.Millisecond) / float64(b.N)
	b.ReportMetric(float64(sum.user+sum.sys)*tick, "cpu-ms/op")
	b.ReportMetric(float64(sum.sys)*tick, "sys-ms/op")
	b.ReportMetric(float64(sum.faults)/float64(b.N), "faults/op")
}
