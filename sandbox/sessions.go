package sandbox

import (
	"context"
	"sync"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// sessions is the set of this node's live sessions and of those being retired (evicted,
// checkpointed before their process stops). Each session guards its own state (live.go);
// the set only keeps the map.
type sessions struct {
	// mu guards m, retiring and closed. It may be held while a session's own lock is
	// taken (to pick or claim a session atomically), never the other way round, and never
	// while waiting on a process or a store.
	mu       sync.Mutex
	m        map[string]*live
	retiring map[string]*live
	closed   bool // shut down: no session is adopted any more
}

func newSessions() *sessions {
	return &sessions{m: map[string]*live{}, retiring: map[string]*live{}}
}

// get is key's live session, or nil.
func (s *sessions) get(key string) *live {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key]
}

func (s *sessions) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// take removes key's live session from the set and returns it, or nil.
func (s *sessions) take(key string) *live {
	s.mu.Lock()
	defer s.mu.Unlock()
	lv := s.m[key]
	if lv != nil {
		delete(s.m, key)
		lv.leave()
	}
	return lv
}

// forgetLocked takes lv out of the live set for retiring; a run of its key waits for the
// retirement (checkpoints.awaitRetired), so it finds the checkpoint made. Called with s.mu held.
func (s *sessions) forgetLocked(lv *live) {
	delete(s.m, lv.name())
	lv.leave()
	s.retiring[lv.name()] = lv
}

// forget takes key's live session out of the set for retiring (checkpoints.retire), as
// an eviction does, and returns it, or nil.
func (s *sessions) forget(key string) *live {
	s.mu.Lock()
	defer s.mu.Unlock()
	lv := s.m[key]
	if lv != nil {
		s.forgetLocked(lv)
	}
	return lv
}

// retired ends lv's retirement.
func (s *sessions) retired(lv *live) {
	s.mu.Lock()
	if s.retiring[lv.name()] == lv {
		delete(s.retiring, lv.name())
	}
	s.mu.Unlock()
	lv.retired()
}

// retiringOf is key's session being retired, or nil.
func (s *sessions) retiringOf(key string) *live {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retiring[key]
}

// forgetOldestIdle forgets the least recently used idle session and returns it for the
// caller to retire, or nil when every live session is busy.
func (s *sessions) forgetOldestIdle() *live {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forgetOldestIdleLocked()
}

func (s *sessions) forgetOldestIdleLocked() *live {
	var old *live
	var oldUsed time.Time
	for _, lv := range s.m {
		if idle, used := lv.idle(); idle && (old == nil || used.Before(oldUsed)) {
			old, oldUsed = lv, used
		}
	}
	if old != nil {
		s.forgetLocked(old)
	}
	return old
}

// overLimit forgets the least recently used idle sessions past max and returns them.
func (s *sessions) overLimit(max int) []*live {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*live
	for len(s.m) > max {
		lv := s.forgetOldestIdleLocked()
		if lv == nil {
			break
		}
		out = append(out, lv)
	}
	return out
}

// idle forgets the sessions idle past timeout, and those whose process died between
// runs, and returns them.
func (s *sessions) idle(timeout time.Duration) []*live {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*live
	for _, lv := range s.m {
		if idle, used := lv.idle(); idle && (!lv.process().Alive() || time.Since(used) > timeout) {
			s.forgetLocked(lv)
			out = append(out, lv)
		}
	}
	return out
}

func (s *sessions) procs() []*proc.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*proc.Process, 0, len(s.m))
	for _, lv := range s.m {
		out = append(out, lv.process())
	}
	return out
}

// isLive tells whether key's interpreter is warm at version.
func (s *sessions) isLive(key string, version int64) bool {
	lv := s.get(key)
	return lv != nil && lv.current(version)
}

// closeAll empties the set for shutdown and returns what it held.
func (s *sessions) closeAll() []*live {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	out := make([]*live, 0, len(s.m))
	for k, lv := range s.m {
		out = append(out, lv)
		delete(s.m, k)
		lv.leave()
	}
	return out
}

// dataVersions is the version of each file under /data that key's process holds, or nil.
func (s *sessions) dataVersions(key string) map[string]string {
	if lv := s.get(key); lv != nil {
		return lv.dataHeld()
	}
	return nil
}

// adopt makes lv (busy, as newLive made it) key's live session; false once the engine
// is shut down, when nothing would ever stop lv's process.
func (s *sessions) adopt(key string, lv *live) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.m[key] = lv
	return true
}

// claim marks key's live session busy if it is current at version; it returns nil
// (after forgetting a stale or dead one, whose process it closes) when the session has
// to be brought back.
func (s *sessions) claim(key string, version int64) *live {
	s.mu.Lock()
	lv := s.m[key]
	if lv != nil && lv.claim(version) {
		s.mu.Unlock()
		return lv
	}
	if lv != nil {
		delete(s.m, key)
		lv.leave()
	}
	s.mu.Unlock()
	if lv != nil {
		go lv.process().Close("the session moved on")
	}
	return nil
}

// probeTimeout bounds the liveness probe before a warm run; a process that cannot
// answer a stats request in this long on a loaded node is not fit to run code either.
const probeTimeout = 10 * time.Second

// answers tells whether p still runs. A process killed while frozen between runs only
// dies when thawed, so Alive() cannot know until something is sent to it: the probe
// thaws it and asks, before any code is given to it.
func answers(ctx context.Context, p *proc.Process) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	defer cancel()
	_, err := p.Call(ctx, proc.StatsReq{Op: "stats"}, nil)
	return err == nil
}

// drop forgets key's live session lv and kills its process: the next run starts from
// the last durable state.
func (s *sessions) drop(key string, lv *live, why string) {
	s.mu.Lock()
	if s.m[key] == lv {
		delete(s.m, key)
	}
	lv.leave()
	s.mu.Unlock()
	lv.process().Close(why)
}
