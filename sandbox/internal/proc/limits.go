package proc

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Limits is what the server may use: the host's memory and CPUs, or less where its own
// control group, or one above it, caps it (a container's or a pod's limit, a systemd
// service's MemoryMax=). Sizing the sandbox from the host inside a limit would admit
// sessions the kernel then kills for the limit it was not told of.
type Limits struct {
	MemoryBytes int64   // the least of the host's memory and every memory cap above the server
	MemoryFrom  string  // where MemoryBytes comes from: "host" or the cgroup file that caps it
	CPUs        float64 // the least of the host's CPUs and every CPU quota above the server
	CPUsFrom    string  // "host" or the cgroup file
	HostMemory  int64   // MemTotal of /proc/meminfo
	HostCPUs    int     // the CPUs this process may run on
}

// FromHost is where a limit comes from when no cgroup caps it below the host's.
const FromHost = "host"

// ReadLimits reads the server's limits. On cgroup v1 the memory cap is the kernel's
// hierarchical_memory_limit (its group's and every ancestor's, those outside a
// container's view included) and the CPU quota the least over the groups it sees; on v2
// both are the least of memory.max and cpu.max over its group and the ancestors it sees
// (a container's own group at the least).
func ReadLimits() Limits {
	l := Limits{HostMemory: memTotal(), HostCPUs: runtime.NumCPU()}
	l.MemoryBytes, l.MemoryFrom = l.HostMemory, FromHost
	l.CPUs, l.CPUsFrom = float64(l.HostCPUs), FromHost
	mounts := hierarchies()
	self, _ := selfCgroups()
	if m, ok := mounts["memory"]; ok {
		dir := m.dirOf(self["memory"])
		b, _ := os.ReadFile(filepath.Join(dir, "memory.stat"))
		if n := kv(string(b), "hierarchical_memory_limit"); capped(n) && n < l.MemoryBytes {
			l.MemoryBytes, l.MemoryFrom = n, "cgroup v1 "+filepath.Join(dir, "memory.stat")+" hierarchical_memory_limit"
		}
	} else if m, ok := mounts[""]; ok && m.has("memory") {
		walkUp(m, m.dirOf(self[""]), func(dir string) {
			if n, ok := readInt(filepath.Join(dir, "memory.max")); ok && capped(n) && n < l.MemoryBytes {
				l.MemoryBytes, l.MemoryFrom = n, "cgroup v2 "+filepath.Join(dir, "memory.max")
			}
		})
	}
	if m, ok := mounts["cpu"]; ok {
		walkUp(m, m.dirOf(self["cpu"]), func(dir string) {
			q, okq := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
			p, okp := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
			if okq && okp && q > 0 && p > 0 && float64(q)/float64(p) < l.CPUs {
				l.CPUs, l.CPUsFrom = float64(q)/float64(p), "cgroup v1 "+filepath.Join(dir, "cpu.cfs_quota_us")
			}
		})
	} else if m, ok := mounts[""]; ok && m.has("cpu") {
		walkUp(m, m.dirOf(self[""]), func(dir string) {
			b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
			f := strings.Fields(string(b))
			if err != nil || len(f) != 2 || f[0] == "max" {
				return
			}
			q, err1 := strconv.ParseFloat(f[0], 64)
			p, err2 := strconv.ParseFloat(f[1], 64)
			if err1 == nil && err2 == nil && q > 0 && p > 0 && q/p < l.CPUs {
				l.CPUs, l.CPUsFrom = q/p, "cgroup v2 "+filepath.Join(dir, "cpu.max")
			}
		})
	}
	return l
}

// WholeCPUs is CPUs rounded up: a quota of 1.5 CPUs runs two starts at once.
func (l Limits) WholeCPUs() int { return max(1, int(math.Ceil(l.CPUs-1e-9))) }

// capped tells a real limit from the kernel's "unlimited" (v1: the largest page-aligned
// int64; v2 writes "max", which does not parse).
func capped(n int64) bool { return n > 0 && n < 1<<62 }

// hierarchy is one cgroup hierarchy as this process sees it.
type hierarchy struct {
	point string   // where it is mounted
	root  string   // the group at the mount point (a container sees its own group there)
	ctrl  []string // v2: the controllers its root offers
}

// dirOf is the directory of group (a path of /proc/self/cgroup) under the mount: a
// container that shares the host's cgroup namespace sees host paths there, and only its
// own group, at the mount point.
func (m hierarchy) dirOf(group string) string {
	rel, ok := strings.CutPrefix(group, m.root)
	if m.root == "/" {
		rel, ok = group, true
	}
	dir := filepath.Join(m.point, rel)
	if st, err := os.Stat(dir); !ok || err != nil || !st.IsDir() {
		return m.point
	}
	return dir
}

func (m hierarchy) has(c string) bool { return slices.Contains(m.ctrl, c) }

// walkUp calls f for dir and each parent up to the mount point.
func walkUp(m hierarchy, dir string, f func(string)) {
	for {
		f(dir)
		if dir == m.point || !strings.HasPrefix(dir, m.point+"/") {
			return
		}
		dir = filepath.Dir(dir)
	}
}

// hierarchies maps each mounted v1 controller, and "" for the v2 hierarchy, to its
// mount (from /proc/self/mountinfo).
func hierarchies() map[string]hierarchy {
	out := map[string]hierarchy{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - fstype source super
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 5 || len(b) < 3 {
			continue
		}
		m := hierarchy{point: unescape(a[4]), root: unescape(a[3])}
		switch b[0] {
		case "cgroup2":
			if ctrl, err := os.ReadFile(filepath.Join(m.point, "cgroup.controllers")); err == nil {
				m.ctrl = strings.Fields(string(ctrl))
			}
			out[""] = m
		case "cgroup":
			for _, o := range strings.Split(b[2], ",") {
				if _, seen := out[o]; !seen && (o == "memory" || o == "cpu") {
					out[o] = m
				}
			}
		}
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readInt(p string) (int64, bool) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n << 10
		}
	}
	return 0
}

// Describe says what the limits are and where they come from, for doctor and the status.
func (l Limits) Describe() string {
	mem := fmt.Sprintf("memory %s (the host's)", gib(l.MemoryBytes))
	if l.MemoryFrom != FromHost {
		mem = fmt.Sprintf("memory %s from %s, below the host's %s", gib(l.MemoryBytes), l.MemoryFrom, gib(l.HostMemory))
	}
	cpu := fmt.Sprintf("%d CPUs (the host's)", l.HostCPUs)
	if l.CPUsFrom != FromHost {
		cpu = fmt.Sprintf("%.2g CPUs from %s, below the host's %d", l.CPUs, l.CPUsFrom, l.HostCPUs)
	}
	return mem + "; " + cpu
}

func gib(n int64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }

// ownOOMKills is how many tasks the kernel's OOM killer has killed in the server's own
// memory group (its container's, a service's): a session without a cgroup of its own
// killed for memory counts there. -1 where it cannot be read.
func ownOOMKills() int64 {
	mounts := hierarchies()
	self, _ := selfCgroups()
	if m, ok := mounts["memory"]; ok {
		b, err := os.ReadFile(filepath.Join(m.dirOf(self["memory"]), "memory.oom_control"))
		if err == nil {
			return kv(string(b), "oom_kill")
		}
	} else if m, ok := mounts[""]; ok {
		b, err := os.ReadFile(filepath.Join(m.dirOf(self[""]), "memory.events"))
		if err == nil {
			return kv(string(b), "oom_kill")
		}
	}
	return -1
}
