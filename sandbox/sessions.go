package sandbox

import (
	"sync"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/session"
)

// sessions is the set of this node's live sessions and of those being retired (evicted,
// checkpointed before their process stops). Each session guards its own state (live.go);
// the set only keeps the map.
type sessions struct {
	// mu guards m, retiring and closed. It may be held while a session's own lock is
	// taken (to pick or claim a session atomically), never the other way round, and never
	// while waiting on a process or a store.
	mu       sync.Mutex
	m        map[string]*session.Session
	retiring map[string]*session.Session
	closed   bool // shut down: no session is adopted any more
}

func newSessions() *sessions {
	return &sessions{m: map[string]*session.Session{}, retiring: map[string]*session.Session{}}
}

// get is key's live session, or nil.
func (s *sessions) get(key string) *session.Session {
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
func (s *sessions) take(key string) *session.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	lv := s.m[key]
	if lv != nil {
		delete(s.m, key)
		lv.Leave()
	}
	return lv
}

// forgetLocked takes lv out of the live set for retiring; a run of its key waits for the
// retirement, so it finds the checkpoint made. Called with s.mu held.
func (s *sessions) forgetLocked(lv *session.Session) {
	delete(s.m, lv.Key())
	lv.Leave()
	s.retiring[lv.Key()] = lv
}

// forget takes key's live session out of the set for retiring (session.Env.Retire), as
// an eviction does, and returns it, or nil.
func (s *sessions) forget(key string) *session.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	lv := s.m[key]
	if lv != nil {
		s.forgetLocked(lv)
	}
	return lv
}

// retired ends lv's retirement.
func (s *sessions) retired(lv *session.Session) {
	s.mu.Lock()
	if s.retiring[lv.Key()] == lv {
		delete(s.retiring, lv.Key())
	}
	s.mu.Unlock()
	lv.Retired()
}

// retiringOf is key's session being retired, or nil.
func (s *sessions) retiringOf(key string) *session.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retiring[key]
}

// forgetOldestIdle forgets the least recently used idle session and returns it for the
// caller to retire, or nil when every live session is busy.
func (s *sessions) forgetOldestIdle() *session.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forgetOldestIdleLocked()
}

func (s *sessions) forgetOldestIdleLocked() *session.Session {
	var old *session.Session
	var oldUsed time.Time
	for _, lv := range s.m {
		if idle, used := lv.Idle(); idle && (old == nil || used.Before(oldUsed)) {
			old, oldUsed = lv, used
		}
	}
	if old != nil {
		s.forgetLocked(old)
	}
	return old
}

// overLimit forgets the least recently used idle sessions past max and returns them.
func (s *sessions) overLimit(max int) []*session.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*session.Session
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
func (s *sessions) idle(timeout time.Duration) []*session.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*session.Session
	for _, lv := range s.m {
		if idle, used := lv.Idle(); idle && (!lv.Process().Alive() || time.Since(used) > timeout) {
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
		out = append(out, lv.Process())
	}
	return out
}

// isLive tells whether key's interpreter is warm at version.
func (s *sessions) isLive(key string, version int64) bool {
	lv := s.get(key)
	return lv != nil && lv.Current(version)
}

// closeAll empties the set for shutdown and returns what it held.
func (s *sessions) closeAll() []*session.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	out := make([]*session.Session, 0, len(s.m))
	for k, lv := range s.m {
		out = append(out, lv)
		delete(s.m, k)
		lv.Leave()
	}
	return out
}

// dataVersions is the version of each file under /data that key's process holds, or nil.
func (s *sessions) dataVersions(key string) map[string]string {
	if lv := s.get(key); lv != nil {
		return lv.DataHeld()
	}
	return nil
}

// adopt makes lv (busy, as it was brought back) key's live session; false once the engine
// is shut down, when nothing would ever stop lv's process.
func (s *sessions) adopt(key string, lv *session.Session) bool {
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
func (s *sessions) claim(key string, version int64) *session.Session {
	s.mu.Lock()
	lv := s.m[key]
	if lv != nil && lv.Claim(version) {
		s.mu.Unlock()
		return lv
	}
	if lv != nil {
		delete(s.m, key)
		lv.Leave()
	}
	s.mu.Unlock()
	if lv != nil {
		go lv.Process().Close("the session moved on")
	}
	return nil
}

// drop forgets key's live session lv and kills its process: the next run starts from
// the last durable state.
func (s *sessions) drop(key string, lv *session.Session, why string) {
	s.mu.Lock()
	if s.m[key] == lv {
		delete(s.m, key)
	}
	lv.Leave()
	s.mu.Unlock()
	lv.Process().Close(why)
}
