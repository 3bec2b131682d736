package sandbox

import (
	"strings"
	"testing"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// TestSizedFromLimits: the automatic bounds follow the memory and CPUs the server may
// use (its cgroup's where lower than the host's: proc's TestLimitsFromOwnCgroupV1 and
// TestCgroupV2LimitsFromOwnGroup read them), and doctor's line says which.
func TestSizedFromLimits(t *testing.T) {
	host := proc.Limits{MemoryBytes: 47 << 29, MemoryFrom: proc.FromHost, CPUs: 2, CPUsFrom: proc.FromHost, HostMemory: 47 << 29, HostCPUs: 2}
	inCgroup := host
	inCgroup.MemoryBytes, inCgroup.MemoryFrom = 3<<30, "cgroup v1 /sys/fs/cgroup/memory/pod/memory.stat hierarchical_memory_limit"
	inCgroup.CPUs, inCgroup.CPUsFrom = 1.5, "cgroup v1 /sys/fs/cgroup/cpu/pod/cpu.cfs_quota_us"
	tiny := host
	tiny.MemoryBytes, tiny.MemoryFrom, tiny.CPUs, tiny.CPUsFrom = 600<<20, "cgroup v2 /sys/fs/cgroup/memory.max", 0.25, "cgroup v2 /sys/fs/cgroup/cpu.max"
	for _, c := range []struct {
		name          string
		l             proc.Limits
		procs, starts int
		says          []string
	}{
		{"host", host, 47, 2, []string{"47 session processes (one per 512 MiB of memory)", "memory 23.5 GiB (the host's)", "2 CPUs (the host's)"}},
		{"3 GiB container", inCgroup, 6, 2, []string{"6 session processes", "memory 3.0 GiB from cgroup v1 /sys/fs/cgroup/memory/pod/", "below the host's 23.5 GiB", "1.5 CPUs from cgroup v1"}},
		{"tiny pod", tiny, 2, 1, []string{"2 session processes", "1 starting at once", "0.25 CPUs"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := sizeFrom(c.l)
			if s.MaxProcesses != c.procs || s.MaxStarting != c.starts {
				t.Errorf("sized to %d processes, %d starting; want %d, %d", s.MaxProcesses, s.MaxStarting, c.procs, c.starts)
			}
			d := s.Describe(DefaultConfig())
			for _, w := range c.says {
				if !strings.Contains(d, w) {
					t.Errorf("%q does not say %q", d, w)
				}
			}
		})
	}
	set := DefaultConfig()
	set.MaxProcesses, set.MaxStarting = 9, 3
	if d := sizeFrom(inCgroup).Describe(set); !strings.Contains(d, "9 session processes (SANDCHAT_SANDBOX_MAX_PROCESSES), 3 starting at once (SANDCHAT_SANDBOX_MAX_STARTING)") {
		t.Errorf("with the settings given: %s", d)
	}
	if a := newAdmission(DefaultConfig(), sizeFrom(inCgroup)); a.maxProcs != 6 {
		t.Errorf("the admission bound in a 3 GiB group: %d, want 6", a.maxProcs)
	}
}
