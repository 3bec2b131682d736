package proc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The cgroup tests start copies of this test binary as other "servers": a child with
// childEnv set opens this engine's cgroups as a server would and prints what it got.
const (
	childEnv   = "SANDCHAT_CGROUP_CHILD"   // names the engine the child opens, after its pid
	childMove  = "SANDCHAT_CGROUP_MOVE_TO" // a group the child moves itself into first
	childReady = "SANDCHAT_CGROUP_WAIT"    // the child waits for a line on stdin before it opens
)

func TestMain(m *testing.M) {
	if groups := os.Getenv(limitsChild); groups != "" {
		os.Exit(limitsChildMain(strings.Split(groups, ",")))
	}
	if name := os.Getenv(childEnv); name != "" {
		// Named as an engine names its group: another server reaps groups whose pid is gone.
		os.Exit(cgroupChild(fmt.Sprintf("sandchat-%d-%s", os.Getpid(), name)))
	}
	os.Exit(m.Run())
}

// cgroupChild is one "server": it opens its engine's groups, makes a session group with
// limits in them, prints the engine's directory (or the error) and closes.
func cgroupChild(name string) int {
	if to := os.Getenv(childMove); to != "" {
		if err := writeFile(filepath.Join(to, "cgroup.procs"), fmt.Sprint(os.Getpid())); err != nil {
			fmt.Println("error", err)
			return 0
		}
	}
	if os.Getenv(childReady) != "" {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	}
	cs, err := openCgroups(name)
	if err != nil {
		fmt.Println("error", err)
		return 0
	}
	defer cs.close()
	cg, err := cs.create("s1", 64<<20, 16)
	if err != nil {
		fmt.Println("error", err)
		return 0
	}
	defer cg.remove()
	fmt.Println("root", cs.roots["unified"])
	return 0
}

func requireV2(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cgroupMount, "cgroup.controllers")); err != nil {
		t.Skip("cgroup v2 only: this host mounts cgroup v1; `make test-cgroup2` runs it on a cgroup-v2-only Linux")
	}
	if os.Geteuid() != 0 {
		t.Skip("cgroup v2: needs root to write the delegated group (run as root, or under make test-cgroup2)")
	}
}

// startedIn is the v2 group this test binary was started in, before any engine moved
// it into the server's leaf.
func startedIn(t *testing.T) string {
	t.Helper()
	self, err := selfCgroups()
	if err != nil {
		t.Fatal(err)
	}
	return v2Parent(self[""])
}

// TestCgroupV2EnginesNeverNest: two servers started together in one delegated group,
// several engines in one process, and a server started again from a shell inside the
// server's leaf all get their groups directly under that delegated group, never one
// inside another, and each can set limits on its sessions.
func TestCgroupV2EnginesNeverNest(t *testing.T) {
	requireV2(t)
	parent := startedIn(t)
	underParent := func(who, root string) {
		t.Helper()
		if filepath.Dir(root) != parent {
			t.Errorf("%s made its groups at %s, want directly under %s", who, root, parent)
		}
	}

	// Two servers started side by side in the delegated group (this process is still
	// there too), released at once so that both find it holding processes.
	type side struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *strings.Builder
	}
	var sides []side
	for i := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=side%d", childEnv, i), childReady+"=1")
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sides = append(sides, side{cmd, in, out})
	}
	for _, s := range sides {
		_, _ = s.in.Write([]byte("go\n"))
		_ = s.in.Close()
	}
	for i, s := range sides {
		if err := s.cmd.Wait(); err != nil {
			t.Fatalf("server %d: %v: %s", i, err, s.out)
		}
		underParent(fmt.Sprintf("server %d of two started together", i), rootOf(t, s.out.String()))
	}

	// Several engines in this process.
	for i := range 3 {
		cs, err := openCgroups(fmt.Sprintf("sandchat-%d-many%d", os.Getpid(), i))
		if err != nil {
			t.Fatalf("engine %d: %v", i, err)
		}
		t.Cleanup(cs.close)
		underParent(fmt.Sprintf("engine %d of one process", i), cs.roots["unified"])
		cg, err := cs.create("s", 64<<20, 16)
		if err != nil {
			t.Fatalf("engine %d: a session group: %v", i, err)
		}
		if b, _ := os.ReadFile(filepath.Join(cg.dir(), "memory.max")); strings.TrimSpace(string(b)) != fmt.Sprint(64<<20) {
			t.Errorf("engine %d: memory.max %q, want %d", i, b, 64<<20)
		}
		cg.remove()
	}
	self, err := selfCgroups()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := filepath.Join(cgroupMount, self[""]), filepath.Join(parent, serverLeaf); got != want {
		t.Errorf("the server runs in %s, want its leaf %s", got, want)
	}

	// A server started again from a shell that lives in the server's leaf: children
	// start in the group this process is in now.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=restart")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("restarted server: %v: %s", err, out)
	}
	underParent("a server started from inside the server's leaf", rootOf(t, string(out)))

	if _, err := os.Stat(filepath.Join(parent, serverLeaf, serverLeaf)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a server leaf inside the server leaf: %v", err)
	}
}

// TestCgroupV2NotDelegated: a server whose group was given no memory controller (a v2
// host without Delegate=yes) is refused with the sentence that says what to grant,
// systemd's form and a container's; it does not start without its limits.
func TestCgroupV2NotDelegated(t *testing.T) {
	requireV2(t)
	// A group whose parent hands it no controller, as a service without Delegate=yes gets.
	host := filepath.Join(cgroupMount, fmt.Sprintf("sandchat-test-nodelegate-%d", os.Getpid()))
	svc := filepath.Join(host, "plain.service")
	if err := os.MkdirAll(svc, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(svc); _ = os.Remove(host) })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=plain", childMove+"="+svc)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := string(out)
	if strings.HasPrefix(got, "root ") {
		t.Fatalf("a server without delegated controllers opened its cgroups: %s", got)
	}
	for _, want := range []string{"is not delegated to it", `controller "memory"`, "Delegate=yes", "cgroup namespace", "--cgroupns=private"} {
		if !strings.Contains(got, want) {
			t.Errorf("the refusal does not say %q: %s", want, got)
		}
	}
}

func rootOf(t *testing.T, out string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if r, ok := strings.CutPrefix(line, "root "); ok {
			return strings.TrimSpace(r)
		}
	}
	t.Fatalf("the server did not open its cgroups: %s", out)
	return ""
}
