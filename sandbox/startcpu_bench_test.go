package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkReadyProcess starts a session process and loads the base interpreter into it,
// as the pool makes a ready process for a new conversation, then stops it: what every new
// conversation costs the node once the pool is drained. cpu-ms is the CPU time (user and
// system, clock ticks) of the process's tasks, the figure a burst divides the cores by;
// sys-ms the kernel's share of it, faults its minor page faults (each a first touch of a
// page, which this kind of VM makes costly). settled-cpu-ms also counts what the process
// does once it is ready, until its threads go quiet: V8's helper threads go on compiling
// (the interpreter's main loop reaches TurboFan after every restore), and a process that
// serves a session pays for that too.
func BenchmarkReadyProcess(b *testing.B) {
	e := defaultsEngine(b, "ready", func(cfg *Config) { cfg.WarmPool, cfg.WarmPoolMax, cfg.WarmSpares = 0, 0, 0 })
	p := e.pool
	var sum taskStat
	var settled int64
	threads := map[string]int64{} // CPU ticks by thread name: Deno's main thread, the Worker's, V8's helpers
	defer func() {
		for n, v := range threads {
			b.Logf("thread %-16s %6.1f cpu-ms/op", n, float64(v)*10/float64(b.N))
		}
	}()
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
		b.StopTimer()
		after := settle(pr.Tasks(), st.user+st.sys)
		for name, ticks := range threadTicks(pr.Tasks()) {
			threads[name] += ticks
		}
		settled += after
		pr.Close("bench")
		b.StartTimer()
	}
	tick := float64(10*time.Millisecond) / float64(time.Millisecond) / float64(b.N)
	b.ReportMetric(float64(sum.user+sum.sys)*tick, "cpu-ms/op")
	b.ReportMetric(float64(sum.sys)*tick, "sys-ms/op")
	b.ReportMetric(float64(sum.faults)/float64(b.N), "faults/op")
	b.ReportMetric(float64(settled)*tick, "settled-cpu-ms/op")
}

// settle waits until the processes' threads stop using CPU (no tick for 300 ms, at most
// 5 s) and returns their CPU ticks then; from is the count at the start.
func settle(pids []int, from int64) int64 {
	last, quiet := from, 0
	for deadline := time.Now().Add(5 * time.Second); quiet < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		st := taskStats(pids)
		if now := st.user + st.sys; now != last {
			last, quiet = now, 0
		} else {
			quiet++
		}
	}
	return last
}

// threadTicks adds up the CPU clock ticks of the processes' threads by thread name.
func threadTicks(pids []int) map[string]int64 {
	out := map[string]int64{}
	for _, pid := range pids {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, t := range ents {
			name, f := procStat(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
			if len(f) > 12 {
				u, _ := strconv.ParseInt(f[11], 10, 64)
				k, _ := strconv.ParseInt(f[12], 10, 64)
				out[name] += u + k
			}
		}
	}
	return out
}
