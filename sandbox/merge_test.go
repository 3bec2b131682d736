package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// BenchmarkSessionPSS measures what one more session costs the machine (PSS: its
// private pages and its share of those it maps with others), with page merging off and
// on (SANDCHAT_SANDBOX_MEMORY_MERGE): sessions sessions idle after a small run, and as
// many live ones holding 150 000 small dicts each, different in each session, all frozen
// between runs. With
// merging on, KSM runs for the measurement (as root: /sys/kernel/mm/ksm/run and its
// scan rate are set, then put back as they were) until it has scanned everything twice.
//
//	go test ./sandbox -run '^$' -bench BenchmarkSessionPSS -benchtime 1x
func BenchmarkSessionPSS(b *testing.B) {
	const sessions = 8
	for _, merge := range []bool{false, true} {
		b.Run(fmt.Sprintf("merge=%v", merge), func(b *testing.B) {
			if merge {
				restore, err := runKSM()
				if err != nil {
					b.Skip(err)
				}
				defer restore()
			}
			e := defaultsEngine(b, "pss", func(cfg *Config) {
				cfg.MemoryMerge, cfg.WarmPool, cfg.WarmPoolMax, cfg.MaxLive = merge, 0, 0, 2*sessions+2
			})
			if merge && !e.procs.launch.Jail.Merging() {
				b.Fatalf("page merging is off: %+v", e.Status(context.Background()).Bounds)
			}
			ctx := context.Background()
			var idle, live []*proc.Process
			for b.Loop() {
				for i := range sessions {
					for _, s := range []struct {
						kind, code string
						into       *[]*proc.Process
					}{
						{"idle", "x = 1", &idle},
						{"live", fmt.Sprintf("data = [{'i': i, 's': str(i * %d) * 8} for i in range(150_000)]\nlen(data)", 7919*(i+1)), &live},
					} {
						key := fmt.Sprintf("pss:%s:%d", s.kind, i)
						if r, err := e.Execute(ctx, key, Request{Code: s.code}); err != nil || r.Status != StatusSuccess {
							b.Fatalf("%s: %v %+v", key, err, r.Error)
						}
						*s.into = append(*s.into, e.sess.get(key).Process())
					}
				}
			}
			// Settled: frozen, and with merging on, scanned by KSM twice over.
			time.Sleep(2 * time.Second)
			if merge {
				ksmd := ksmdTicks()
				if err := awaitKSMScans(2, 3*time.Minute); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(ksmdTicks()-ksmd)/100/2, "ksmd-cpu-s/scan")
			}
			avg := func(ps []*proc.Process) float64 {
				var sum int64
				for _, p := range ps {
					sum += p.PSS()
				}
				return float64(sum) / float64(len(ps)) / (1 << 20)
			}
			b.ReportMetric(avg(idle), "MiB-PSS/idle-session")
			b.ReportMetric(avg(live), "MiB-PSS/live-session")
			if merge {
				b.Logf("KSM: %s", ksmStats())
			}
		})
	}
}

const ksmDir = "/sys/kernel/mm/ksm"

// runKSM starts KSM with a fast scan and returns what puts its settings back.
func runKSM() (restore func(), err error) {
	saved := map[string]string{}
	for _, f := range []string{"run", "pages_to_scan", "sleep_millisecs"} {
		b, err := os.ReadFile(filepath.Join(ksmDir, f))
		if err != nil {
			return nil, fmt.Errorf("KSM is not available here: %v", err)
		}
		saved[f] = strings.TrimSpace(string(b))
	}
	restore = func() {
		// run last: the scan rate is the machine's again before KSM stops or goes on.
		for _, f := range []string{"pages_to_scan", "sleep_millisecs", "run"} {
			_ = os.WriteFile(filepath.Join(ksmDir, f), []byte(saved[f]), 0)
		}
	}
	for f, v := range map[string]string{"pages_to_scan": "4000", "sleep_millisecs": "10", "run": "1"} {
		if err := os.WriteFile(filepath.Join(ksmDir, f), []byte(v), 0); err != nil {
			restore()
			return nil, fmt.Errorf("KSM cannot be started (as root: %s/%s): %v", ksmDir, f, err)
		}
	}
	return restore, nil
}

func ksmInt(f string) int64 {
	b, _ := os.ReadFile(filepath.Join(ksmDir, f))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// awaitKSMScans waits for n more full scans of KSM.
func awaitKSMScans(n int64, within time.Duration) error {
	start := ksmInt("full_scans")
	deadline := time.Now().Add(within)
	for ksmInt("full_scans") < start+n {
		if time.Now().After(deadline) {
			return fmt.Errorf("KSM made %d full scans in %s, want %d", ksmInt("full_scans")-start, within, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// ksmdTicks is the CPU time ksmd has used, in clock ticks.
func ksmdTicks() int64 {
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		if b, err := os.ReadFile("/proc/" + d.Name() + "/comm"); err == nil && strings.TrimSpace(string(b)) == "ksmd" {
			return cpuTicks([]int{mustAtoi(d.Name())})
		}
	}
	return 0
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func ksmStats() string {
	var parts []string
	for _, f := range []string{"pages_shared", "pages_sharing", "pages_unshared", "full_scans"} {
		parts = append(parts, fmt.Sprintf("%s %d", f, ksmInt(f)))
	}
	return strings.Join(parts, ", ")
}

// TestMemoryMerge: with page merging asked for and KSM running, every session process
// is marked for merging (the kernel's ksm_merge_any) and doctor's bounds say so; with KSM
// stopped the engine runs without it and says why.
func TestMemoryMerge(t *testing.T) {
	if _, err := os.Stat(filepath.Join(ksmDir, "run")); err != nil || os.Geteuid() != 0 {
		t.Skip("KSM and root are needed to start and stop it")
	}
	saved, _ := os.ReadFile(filepath.Join(ksmDir, "run"))
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(ksmDir, "run"), saved, 0) })
	for _, run := range []string{"1", "0"} {
		t.Run("ksm run="+run, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(ksmDir, "run"), []byte(run), 0); err != nil {
				t.Fatal(err)
			}
			e, _ := newEngine(t, func(c *Config) { c.MemoryMerge = true })
			var merging string
			for _, b := range e.Status(context.Background()).Bounds {
				if b.What == "page merging" {
					merging = b.How
				}
			}
			mustSucceed(t, e, "merge", "x = 1")
			pi, err := e.Inspect("merge")
			if err != nil {
				t.Fatal(err)
			}
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/ksm_stat", pi.PID))
			marked := strings.Contains(string(stat), "ksm_merge_any: yes")
			if run == "1" && (!marked || !strings.HasPrefix(merging, "on:")) {
				t.Fatalf("KSM running: the session's process is marked %v (%s); bounds say %q", marked, stat, merging)
			}
			if run == "0" && (marked || !strings.Contains(merging, "KSM does not run")) {
				t.Fatalf("KSM stopped: the session's process is marked %v; bounds say %q", marked, merging)
			}
		})
	}
}
