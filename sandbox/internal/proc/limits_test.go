package proc

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// limitsChild names the groups (comma-separated) a copy of this test binary moves into
// before it reads its limits and prints them as JSON.
const limitsChild = "SANDCHAT_LIMITS_CHILD"

func limitsChildMain(groups []string) int {
	for _, g := range groups {
		if err := writeFile(filepath.Join(g, "cgroup.procs"), fmt.Sprint(os.Getpid())); err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(ReadLimits())
	return 0
}

// limitsIn starts a copy of this binary in groups and returns the limits it read there.
func limitsIn(t *testing.T, groups ...string) Limits {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), limitsChild+"="+strings.Join(groups, ","))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child in %v: %v: %s", groups, err, out)
	}
	var l Limits
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatalf("child in %v: %v: %s", groups, err, out)
	}
	return l
}

// childGroup makes a group named for the test under dir and removes it after.
func childGroup(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	g := filepath.Join(dir, fmt.Sprintf("sandchat-limits-test-%d", os.Getpid()))
	if err := os.Mkdir(g, 0o755); err != nil {
		t.Fatalf("make a test group: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(g) })
	for name, v := range files {
		if err := writeFile(filepath.Join(g, name), v); err != nil {
			t.Fatalf("%s/%s = %s: %v", g, name, v, err)
		}
	}
	return g
}

// TestLimitsFromOwnCgroupV1: a server started inside a 3 GiB memory group with a quota
// of 1.5 CPUs (cgroup v1, as a container on a v1 host gets) reads 3 GiB and 1.5 CPUs,
// and names the files they come from, not the host's memory and CPUs.
func TestLimitsFromOwnCgroupV1(t *testing.T) {
	mounts := hierarchies()
	mem, okm := mounts["memory"]
	cpu, okc := mounts["cpu"]
	if !okm || !okc {
		t.Skip("cgroup v1 memory and cpu hierarchies: this host has none; TestCgroupV2LimitsFromOwnGroup runs on v2 (make test-cgroup2)")
	}
	if os.Geteuid() != 0 {
		t.Skip("cgroup v1: needs root to make a group")
	}
	self, err := selfCgroups()
	if err != nil {
		t.Fatal(err)
	}
	host := ReadLimits()
	if host.HostMemory <= 3<<30 {
		t.Skipf("the host has %d bytes of memory: a 3 GiB limit would not be lower", host.HostMemory)
	}
	const limit = 3 << 30
	mg := childGroup(t, mem.dirOf(self["memory"]), map[string]string{"memory.limit_in_bytes": fmt.Sprint(limit)})
	cg := childGroup(t, cpu.dirOf(self["cpu"]), map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "150000"})
	l := limitsIn(t, mg, cg)
	if l.MemoryBytes != limit || !strings.Contains(l.MemoryFrom, mg) {
		t.Errorf("memory %d from %q, want %d from %s (the host has %d)", l.MemoryBytes, l.MemoryFrom, limit, mg, l.HostMemory)
	}
	if host.HostCPUs >= 2 && (l.CPUs != 1.5 || l.WholeCPUs() != 2 || !strings.Contains(l.CPUsFrom, cg)) {
		t.Errorf("CPUs %v (%d whole) from %q, want 1.5 (2) from %s", l.CPUs, l.WholeCPUs(), l.CPUsFrom, cg)
	}
	if d := l.Describe(); !strings.Contains(d, "3.0 GiB") || !strings.Contains(d, "below the host's") {
		t.Errorf("Describe: %s", d)
	}
	// A group above the server's caps it too: a child group of the 3 GiB one, itself
	// unlimited, still reads 3 GiB.
	inner := childGroup(t, mg, nil)
	if l := limitsIn(t, inner); l.MemoryBytes != limit {
		t.Errorf("under a 3 GiB parent: memory %d from %q, want %d", l.MemoryBytes, l.MemoryFrom, limit)
	}
}

// TestCgroupV2LimitsFromOwnGroup: on cgroup v2, a server whose group has memory.max
// 3 GiB under a parent with cpu.max of 1.5 CPUs reads both, and names the files.
func TestCgroupV2LimitsFromOwnGroup(t *testing.T) {
	requireV2(t)
	parent := startedIn(t)
	ctrl, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	want := "+memory"
	if ctrlAt, _ := os.ReadFile(filepath.Join(parent, "cgroup.controllers")); strings.Contains(string(ctrlAt), "cpu") {
		want += " +cpu"
	}
	// The delegated group hands controllers to children only once it holds no process:
	// this test binary (and anything beside it) moves into the server's leaf, as an
	// engine does.
	if !strings.Contains(string(ctrl), "memory") || (strings.Contains(want, "cpu") && !strings.Contains(string(ctrl), "cpu")) {
		leaf := filepath.Join(parent, serverLeaf)
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := moveAll(filepath.Join(parent, "cgroup.procs"), filepath.Join(leaf, "cgroup.procs")); err != nil {
			t.Fatal(err)
		}
		if err := writeFile(filepath.Join(parent, "cgroup.subtree_control"), want); err != nil {
			t.Fatalf("enable %s under %s: %v", want, parent, err)
		}
	}
	files := map[string]string{}
	if strings.Contains(want, "cpu") {
		files["cpu.max"] = "150000 100000"
	}
	outer := childGroup(t, parent, files)
	if err := writeFile(filepath.Join(outer, "cgroup.subtree_control"), "+memory"); err != nil {
		t.Fatal(err)
	}
	// 3 GiB, or half of a guest that has less.
	limit := min(int64(3<<30), ReadLimits().HostMemory/2&^0xfff)
	inner := childGroup(t, outer, map[string]string{"memory.max": fmt.Sprint(limit)})
	l := limitsIn(t, inner)
	if l.MemoryBytes != limit || l.MemoryFrom != "cgroup v2 "+filepath.Join(inner, "memory.max") {
		t.Errorf("memory %d from %q, want %d from %s/memory.max", l.MemoryBytes, l.MemoryFrom, limit, inner)
	}
	if _, ok := files["cpu.max"]; ok && l.HostCPUs >= 2 && (l.CPUs != 1.5 || l.CPUsFrom != "cgroup v2 "+filepath.Join(outer, "cpu.max")) {
		t.Errorf("CPUs %v from %q, want 1.5 from %s/cpu.max", l.CPUs, l.CPUsFrom, outer)
	}
	t.Logf("in a v2 group: %s", l.Describe())
}
