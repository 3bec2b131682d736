package sandbox

import (
	"fmt"
	"sync"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// residency decides which sessions keep a process on this node: a session that ran is
// adopted; past MaxLive, IdleTimeout, or when a run waits for a process slot
// (admission.go), an idle one is evicted, checkpointed first (checkpoint.go). Its lock
// guards only the count of evictions in flight; the sessions have their own.
type residency struct {
	cfg   *Config // the engine's
	sess  *sessions
	ckpt  *checkpoints
	pool  *pool
	adm   *admission
	procs *nodeProcs

	mu         sync.Mutex // guards reclaiming
	reclaiming int        // evicted processes not gone yet: each frees one slot soon
}

// errShutDown answers a run whose session came back as the engine shut down.
var errShutDown = &sandchat.Error{Code: sandchat.EUNAVAILABLE, RetryAfter: 2,
	Message: "The Python sandbox is shutting down on this server; run the code again."}

// adopt makes lv key's live session, busy, and evicts past MaxLive; false once the
// engine is shut down.
func (r *residency) adopt(key string, lv *live) bool {
	if !r.sess.adopt(key, lv) {
		return false
	}
	r.trim()
	return true
}

// trim evicts the least recently used idle sessions past MaxLive. Only idle ones can go:
// a session adopted while the others were busy (a run, a checkpoint) leaves more than
// MaxLive live until one of them is idle again, so trim runs then too (release, and
// the end of a checkpoint).
func (r *residency) trim() {
	for _, old := range r.sess.overLimit(r.cfg.MaxLive) {
		go r.ckpt.retire(old, "evicted (least recently used)")
	}
}

// release marks lv idle after a run; its process is frozen until the next one.
func (r *residency) release(lv *live) {
	lv.process().FreezeSoon()
	lv.release()
	r.trim()
	if r.adm.procs.Waiting() > 0 {
		// Runs wait for a process: this idle one (or an older one) makes room.
		r.reclaim()
	}
}

// reclaim frees one process slot for a run that waits, unless evictions already under
// way will: a pooled process nobody took first, else the least recently used idle
// session. Called when a run starts waiting and when a run ends while some wait.
func (r *residency) reclaim() {
	r.mu.Lock()
	if r.reclaiming >= r.adm.procs.Waiting() {
		r.mu.Unlock()
		return
	}
	pooled := r.pool.evictOne()
	var lv *live
	if pooled == nil {
		lv = r.sess.forgetOldestIdle()
	}
	if pooled == nil && lv == nil {
		r.mu.Unlock()
		return
	}
	r.reclaiming++
	r.mu.Unlock()
	go func() {
		if pooled != nil {
			pooled.Close("evicted: room for a waiting run (pooled)")
		} else {
			r.ckpt.retire(lv, "evicted: room for a waiting run (least recently used)")
		}
		r.mu.Lock()
		r.reclaiming--
		r.mu.Unlock()
	}()
}

// watch evicts idle sessions and forgets the ones whose process died (they come back
// from Redis on their next run), every second until stop.
func (r *residency) watch(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for _, lv := range r.sess.idle(r.cfg.IdleTimeout) {
			go r.ckpt.retire(lv, "evicted (idle)")
		}
		if r.adm.procs.Waiting() > 0 {
			// A run that waited while every session was busy: one may be idle by now.
			r.reclaim()
		}
		if j := r.procs.launch.Jail; j.Cgroups == nil {
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
