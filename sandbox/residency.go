package sandbox

import (
	"fmt"
	"sync"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/session"
)

// residency decides which sessions keep a process on this node: a session brought back
// for a run is adopted; past MaxLive, IdleTimeout, or when a run waits for a process
// slot (admission.go), an idle one is evicted, checkpointed first (Session.Retire). Its
// lock guards only the count of evictions in flight; the sessions have their own.
type residency struct {
	cfg   *Config // the engine's
	sess  *sessions
	pool  *pool
	adm   *admission
	procs *nodeProcs

	mu         sync.Mutex // guards reclaiming
	reclaiming int        // evicted processes not gone yet: each frees one slot soon
}

// adopt makes s key's session and evicts past MaxLive; false once the engine is shut
// down.
func (r *residency) adopt(key string, s *session.Session) bool {
	if !r.sess.adopt(key, s) {
		return false
	}
	r.trim()
	return true
}

// trim evicts the least recently used idle sessions past MaxLive. Only idle ones can go:
// a session adopted while the others were busy (a run, a checkpoint) leaves more than
// MaxLive live until one of them is idle again, so trim runs then too (after each run,
// and every second).
func (r *residency) trim() {
	r.sess.retire(r.sess.overLimit(r.cfg.MaxLive), "evicted (least recently used)")
}

// ran follows a run's end: its session is idle again, so one past MaxLive may go, and a
// run that waits for a process may have it.
func (r *residency) ran() {
	r.trim()
	if r.adm.procs.Waiting() > 0 {
		// Runs wait for a process: this idle one (or an older one) makes room.
		r.reclaim()
	}
}

// reclaim frees process slots for the runs that wait, one for each that evictions
// already under way will not serve: a pooled process nobody took first, else the least
// recently used idle session. Called when runs start waiting and when a run ends while
// some wait.
func (r *residency) reclaim() {
	for r.reclaimOne() {
	}
}

// reclaimOne starts one eviction for a run that waits; false when none is needed or
// there is nothing idle to evict.
func (r *residency) reclaimOne() bool {
	r.mu.Lock()
	if r.reclaiming >= r.adm.procs.Waiting() {
		r.mu.Unlock()
		return false
	}
	pooled := r.pool.evictOne()
	var s *session.Session
	if pooled == nil {
		s = r.sess.evictOldest()
	}
	if pooled == nil && s == nil {
		r.mu.Unlock()
		return false
	}
	r.reclaiming++
	r.mu.Unlock()
	go func() {
		if pooled != nil {
			pooled.Close("evicted: room for a waiting run (pooled)")
		} else {
			retire(s, "evicted: room for a waiting run (least recently used)")
		}
		r.mu.Lock()
		r.reclaiming--
		r.mu.Unlock()
	}()
	return true
}

// watch makes room for runs that start waiting for a process, as they come; and every
// second it evicts idle sessions and the ones whose process died (they come back from
// Redis on their next run), until stop.
func (r *residency) watch(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-r.adm.procs.Pressure():
			r.reclaim()
			continue
		case <-t.C:
		}
		r.sess.retire(r.sess.idle(r.cfg.IdleTimeout), "evicted (idle)")
		r.trim()
		if r.adm.procs.Waiting() > 0 {
			// A run that waited while every session was busy: one may be idle by now.
			r.reclaim()
		}
		if j := r.procs.launch.Jail; !j.Strict() {
			capMemory(r.sess.procs(), j.MemoryLimit())
		}
	}
}

// capMemory kills the processes over limit: without a cgroup to cap a session's
// memory, the engine does it, coarsely.
func capMemory(procs []*proc.Process, limit int64) {
	for _, p := range procs {
		if m := p.Memory(); m > limit {
			p.Kill(fmt.Sprintf("the session exceeded its memory limit (%d MiB) and was stopped", limit>>20))
		}
	}
}
