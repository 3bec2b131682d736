package proc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cgroups gives each session process its own control group: a hard memory cap (the
// kernel OOM-kills a process over it, and nothing else), a cap on tasks (threads count),
// a freezer (a session's JS timers cannot run between its runs) and a way to kill every
// task of a session at once. Both cgroup v1 (a hierarchy per controller) and v2 (one
// unified hierarchy) are supported.
type Cgroups struct {
	version int
	// v1: the directory, per controller, under which this engine's groups are made;
	// v2: the single directory, under "unified".
	roots map[string]string
}

var cgroupV1Controllers = []string{"freezer", "memory", "pids"} // freezer first: reaping thaws before it kills

// cgroupMount is where the kernel's cgroup hierarchies are mounted.
const cgroupMount = "/sys/fs/cgroup"

// openCgroups finds writable hierarchies and makes this engine's parent group in each,
// nested under the server's own cgroup so that its limits keep applying.
func openCgroups(name string) (*Cgroups, error) {
	self, err := selfCgroups()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(cgroupMount, "cgroup.controllers")); err == nil {
		return openCgroupsV2(name, self[""])
	}
	cg := &Cgroups{version: 1, roots: map[string]string{}}
	for _, c := range cgroupV1Controllers {
		mnt := filepath.Join(cgroupMount, c)
		if _, err := os.Stat(filepath.Join(mnt, "cgroup.procs")); err != nil {
			return nil, fmt.Errorf("cgroup v1 controller %q is not mounted at %s", c, mnt)
		}
		parent := filepath.Join(mnt, self[c])
		reapStale(parent)
		dir := filepath.Join(parent, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s: %w", c, err)
		}
		cg.roots[c] = dir
	}
	return cg, nil
}

// serverLeaf is the v2 group the server moves its own processes into, beside its
// engines' groups: a v2 group hands controllers to children only while it holds no
// process itself.
const serverLeaf = "sandchat-server"

// ErrNotDelegated is what a v2 host that gives the server no controllers of its own
// answers; its message says, in one sentence, what an operator must grant.
type ErrNotDelegated struct {
	Group  string // the server's group, as /sys/fs/cgroup/...
	Reason string // what was found
}

func (e *ErrNotDelegated) Error() string {
	return fmt.Sprintf("cgroup v2: the server's group %s is not delegated to it (%s): grant it one, "+
		"with systemd by running sandchat as a service with Delegate=yes (or under `systemd-run --scope -p Delegate=yes`), "+
		"in a container by giving it its own cgroup namespace with /sys/fs/cgroup writable "+
		"(Docker: --cgroupns=private in a user namespace, rootless or userns-remap; Podman: --cgroupns=private --security-opt unmask=/sys/fs/cgroup; "+
		"Kubernetes: hostUsers: false; docs/deploying.md)",
		e.Group, e.Reason)
}

// v2Parent is the group this server's engines live under: the group it was started in,
// or that group's parent when the server runs in the leaf it (or another sandchat
// server started beside it) made there, so that restarts and several engines never nest.
func v2Parent(self string) string {
	if filepath.Base(self) == serverLeaf {
		self = filepath.Dir(self)
	}
	return filepath.Join(cgroupMount, self)
}

func openCgroupsV2(name, self string) (*Cgroups, error) {
	parent := v2Parent(self)
	ctrl, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		// A container that shares the host's cgroup namespace sees a path of the host's.
		return nil, &ErrNotDelegated{Group: parent, Reason: "it is not visible in this mount namespace: " + err.Error()}
	}
	have := strings.Fields(string(ctrl))
	for _, c := range []string{"memory", "pids"} {
		if !slices.Contains(have, c) {
			return nil, &ErrNotDelegated{Group: parent, Reason: fmt.Sprintf("controller %q is not enabled for it", c)}
		}
	}
	if err := enableV2(parent); err != nil {
		return nil, err
	}
	reapStale(parent)
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup v2: %w", err)
	}
	if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+memory +pids"); err != nil {
		return nil, fmt.Errorf("cgroup v2: enable memory and pids under %s: %w", dir, err)
	}
	return &Cgroups{version: 2, roots: map[string]string{"unified": dir}}, nil
}

// enableV2 hands memory and pids to parent's children. The kernel refuses that while
// parent holds processes (EBUSY): the server's own, and those of anything started
// beside it in the same group, move into the server's leaf first.
func enableV2(parent string) error {
	sub := filepath.Join(parent, "cgroup.subtree_control")
	if b, err := os.ReadFile(sub); err == nil {
		if f := strings.Fields(string(b)); slices.Contains(f, "memory") && slices.Contains(f, "pids") {
			return nil
		}
	}
	err := writeFile(sub, "+memory +pids")
	if err == nil {
		return nil
	}
	if !errors.Is(err, syscall.EBUSY) {
		return &ErrNotDelegated{Group: parent, Reason: "its cgroup.subtree_control cannot be written: " + err.Error()}
	}
	leaf := filepath.Join(parent, serverLeaf)
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return &ErrNotDelegated{Group: parent, Reason: "no group can be made in it: " + err.Error()}
	}
	// A child forked while the server moves (a Deno the engine starts meanwhile) stays
	// behind in parent: move again until parent is empty, since every later fork starts
	// in the leaf.
	for range 50 {
		if err := moveAll(filepath.Join(parent, "cgroup.procs"), filepath.Join(leaf, "cgroup.procs")); err != nil {
			return &ErrNotDelegated{Group: parent, Reason: "the server cannot move itself into " + leaf + ": " + err.Error()}
		}
		if err = writeFile(sub, "+memory +pids"); !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("cgroup v2: enable memory and pids under %s: %w", parent, err)
	}
	return nil
}

// reapStale ends what a server that died left behind: its sessions' groups, frozen or
// not, under parent/sandchat-<pid>-… where that pid is gone.
func reapStale(parent string) {
	entries, _ := os.ReadDir(parent)
	for _, d := range entries {
		f := strings.SplitN(d.Name(), "-", 3)
		if !d.IsDir() || len(f) != 3 || f[0] != "sandchat" {
			continue
		}
		if pid, err := strconv.Atoi(f[1]); err != nil || syscall.Kill(pid, 0) == nil {
			continue // a live server's, or not ours
		}
		engine := filepath.Join(parent, d.Name())
		groups, _ := os.ReadDir(engine)
		for _, g := range groups {
			if !g.IsDir() {
				continue
			}
			dir := filepath.Join(engine, g.Name())
			cg := &Cgroup{version: 1, dirs: map[string]string{"memory": dir, "freezer": dir}}
			if fileExists(filepath.Join(dir, "cgroup.freeze")) {
				cg = &Cgroup{version: 2, dirs: map[string]string{"unified": dir}}
			}
			cg.kill()
			cg.remove()
		}
		_ = os.Remove(engine)
	}
}

func moveAll(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	for _, pid := range strings.Fields(string(b)) {
		// A process that exited meanwhile is not an error.
		if err := writeFile(to, pid); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
	}
	return nil
}

// selfCgroups maps each v1 controller (and "" for v2) to this process's group path.
func selfCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, sc.Err()
}

// Cgroup is one session process's group.
type Cgroup struct {
	version int
	dirs    map[string]string // controller → directory (v2: "unified")
}

// create makes a group with the given caps. memory is the hard limit of the whole
// process (swap included where the kernel accounts it); tasks bounds processes and
// threads.
func (cs *Cgroups) create(id string, memory int64, tasks int) (*Cgroup, error) {
	cg := &Cgroup{version: cs.version, dirs: map[string]string{}}
	for c, root := range cs.roots {
		dir := filepath.Join(root, id)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			cg.remove()
			return nil, err
		}
		cg.dirs[c] = dir
	}
	mem := strconv.FormatInt(memory, 10)
	var err error
	if cs.version == 1 {
		err = errors.Join(
			writeFile(filepath.Join(cg.dirs["memory"], "memory.limit_in_bytes"), mem),
			writeFile(filepath.Join(cg.dirs["pids"], "pids.max"), strconv.Itoa(tasks)),
		)
		// Without swap accounting the file is absent and swap is no way around the cap.
		if p := filepath.Join(cg.dirs["memory"], "memory.memsw.limit_in_bytes"); err == nil && fileExists(p) {
			err = writeFile(p, mem)
		}
	} else {
		d := cg.dirs["unified"]
		err = errors.Join(
			writeFile(filepath.Join(d, "memory.max"), mem),
			writeFile(filepath.Join(d, "pids.max"), strconv.Itoa(tasks)),
		)
		if p := filepath.Join(d, "memory.swap.max"); err == nil && fileExists(p) {
			err = writeFile(p, "0")
		}
	}
	if err != nil {
		cg.remove()
		return nil, fmt.Errorf("cgroup limits: %w", err)
	}
	return cg, nil
}

// add puts a process in every controller's group; its children inherit them.
func (cg *Cgroup) add(pid int) error {
	for _, d := range cg.dirs {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

func (cg *Cgroup) dir() string {
	if cg.version == 2 {
		return cg.dirs["unified"]
	}
	return cg.dirs["memory"]
}

// pids lists every task of the group (processes, not threads).
func (cg *Cgroup) pids() []int {
	b, err := os.ReadFile(filepath.Join(cg.dir(), "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// freeze stops every thread of the group until thaw; the kernel does it, so no code in
// the session can keep running (a timer, a Worker it started).
func (cg *Cgroup) freeze(frozen bool) error {
	if cg.version == 2 {
		return writeFile(filepath.Join(cg.dirs["unified"], "cgroup.freeze"), map[bool]string{true: "1", false: "0"}[frozen])
	}
	return writeFile(filepath.Join(cg.dirs["freezer"], "freezer.state"), map[bool]string{true: "FROZEN", false: "THAWED"}[frozen])
}

// kill ends every task of the group, frozen or not.
func (cg *Cgroup) kill() {
	if cg.version == 2 && writeFile(filepath.Join(cg.dirs["unified"], "cgroup.kill"), "1") == nil {
		return
	}
	for range 3 {
		pids := cg.pids()
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		// A frozen task dies only once thawed.
		_ = cg.freeze(false)
		time.Sleep(5 * time.Millisecond)
	}
}

// memory is the group's current charge in bytes.
func (cg *Cgroup) memory() int64 {
	name := "memory.usage_in_bytes"
	if cg.version == 2 {
		name = "memory.current"
	}
	b, err := os.ReadFile(filepath.Join(cg.dir(), name))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// oomKilled tells whether the kernel killed a task of the group for its memory cap.
func (cg *Cgroup) oomKilled() bool {
	if cg.version == 2 {
		b, _ := os.ReadFile(filepath.Join(cg.dirs["unified"], "memory.events"))
		return kv(string(b), "oom_kill") > 0
	}
	b, _ := os.ReadFile(filepath.Join(cg.dirs["memory"], "memory.oom_control"))
	return kv(string(b), "oom_kill") > 0
}

func kv(text, key string) int64 {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// remove deletes the group once its tasks are gone, retrying briefly while the kernel
// finishes reaping them.
func (cg *Cgroup) remove() {
	for _, d := range cg.dirs {
		for i := 0; i < 50; i++ {
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// close removes this engine's parent groups; sessions' groups are gone by then.
func (cs *Cgroups) close() {
	for _, d := range cs.roots {
		_ = os.Remove(d)
	}
}

func writeFile(p, s string) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
