package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// ProcessInfo shows how a live session's process is confined, as the kernel sees it.
type ProcessInfo struct {
	PID        int      `json:"pid"`         // the Deno process, as the host numbers it
	UID        string   `json:"uid"`         // its real user on the host
	Namespaces []string `json:"namespaces"`  // namespaces it does not share with the server
	Cgroup     string   `json:"cgroup"`      // its memory cgroup
	MemoryMax  int64    `json:"memory_max"`  // the kernel's cap on the whole process, bytes
	TasksMax   int      `json:"tasks_max"`   // processes and threads it may have
	MemoryUsed int64    `json:"memory_used"` // what it holds now
}

// Inspect describes the process of key's live session; ENOTFOUND when it is not live.
func (e *Engine) Inspect(key string) (ProcessInfo, error) {
	p := e.sess.process(key)
	if p == nil || !p.Alive() {
		return ProcessInfo{}, sandchat.Errorf(sandchat.ENOTFOUND, "Session %q is not live on this node.", key)
	}
	info := ProcessInfo{PID: denoPID(p, e.cfg.DenoPath), MemoryUsed: p.Memory()}
	if dir := p.CgroupDir(); dir != "" {
		info.Cgroup, info.MemoryMax, info.TasksMax = dir, e.procs.launch.Jail.MemoryLimit(), proc.SessionTasks
	}
	if info.PID == 0 {
		return info, nil
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", info.PID)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" {
				info.UID = f[1]
			}
		}
	}
	for _, ns := range []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"} {
		theirs, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", info.PID, ns))
		ours, err2 := os.Readlink("/proc/self/ns/" + ns)
		if err1 == nil && err2 == nil && theirs != ours {
			info.Namespaces = append(info.Namespaces, ns)
		}
	}
	return info, nil
}

// denoPID finds the Deno process among the session's tasks (under bubblewrap it is a
// grandchild of the process the engine started).
func denoPID(p *proc.Process, deno string) int {
	for _, pid := range p.Tasks() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		if arg0, _, _ := bytes.Cut(b, []byte{0}); string(arg0) == deno {
			return pid
		}
	}
	return 0
}
