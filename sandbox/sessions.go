package sandbox

import (
	"context"
	"sync"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/session"
)

// sessions is the map of this node's sessions: the latest one of each key, live or
// being retired (a run of its key waits for that: Open). Each session owns its state,
// its lock and its life (internal/session); the map only keeps them and hands the
// node's choices (which to evict, when) to them.
type sessions struct {
	// mu guards m and closed. It may be held while a session's own lock is taken (to
	// evict an idle session atomically), never the other way round, and never while
	// waiting on a process or a store.
	mu     sync.Mutex
	m      map[string]*session.Session
	closed bool // shut down: no session is adopted any more
}

// retireTimeout bounds the checkpoint an evicted session gets before its process goes;
// shutdownTimeout, all of them at shutdown together.
const (
	retireTimeout   = 30 * time.Second
	shutdownTimeout = 10 * time.Second
)

func newSessions() *sessions {
	return &sessions{m: map[string]*session.Session{}}
}

// get is key's session, in whatever phase, or nil.
func (m *sessions) get(key string) *session.Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[key]
}

// take removes key's session from the map and returns it, or nil.
func (m *sessions) take(key string) *session.Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.m[key]
	delete(m.m, key)
	return s
}

// adopt makes s key's session; false once the engine is shut down, when nothing would
// ever stop s's process.
func (m *sessions) adopt(key string, s *session.Session) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.m[key] = s
	return true
}

// liveLocked lists the sessions that hold a live interpreter, and forgets those whose
// process is gone and that nothing retires any more. Called with m.mu held.
func (m *sessions) liveLocked() []*session.Session {
	out := make([]*session.Session, 0, len(m.m))
	for k, s := range m.m {
		if _, ok := s.Live(); ok {
			out = append(out, s)
		} else if !s.Process().Alive() {
			delete(m.m, k)
		}
	}
	return out
}

func (m *sessions) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.liveLocked())
}

// procs are the processes of the live sessions.
func (m *sessions) procs() []*proc.Process {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*proc.Process
	for _, s := range m.liveLocked() {
		out = append(out, s.Process())
	}
	return out
}

// process is the process of key's live session, or nil.
func (m *sessions) process(key string) *proc.Process {
	s := m.get(key)
	if s == nil {
		return nil
	}
	if _, ok := s.Live(); !ok {
		return nil
	}
	return s.Process()
}

// live tells whether key's interpreter is warm at version.
func (m *sessions) live(key string, version int64) bool {
	s := m.get(key)
	if s == nil {
		return false
	}
	v, ok := s.Live()
	return ok && v == version
}

// evictOldestLocked evicts the least recently used idle session and returns it for the
// caller to retire, or nil when no live session is idle. Called with m.mu held.
func (m *sessions) evictOldestLocked() *session.Session {
	var old *session.Session
	var oldUsed time.Time
	for _, s := range m.m {
		if used, idle := s.Idle(); idle && (old == nil || used.Before(oldUsed)) {
			old, oldUsed = s, used
		}
	}
	if old != nil && !old.Evict() {
		return nil // a run took it meanwhile; the next call finds another
	}
	return old
}

// evictOldest evicts the least recently used idle session, or returns nil.
func (m *sessions) evictOldest() *session.Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.evictOldestLocked()
}

// overLimit evicts the least recently used idle sessions past max and returns them.
func (m *sessions) overLimit(max int) []*session.Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*session.Session
	for len(m.liveLocked()) > max {
		s := m.evictOldestLocked()
		if s == nil {
			break
		}
		out = append(out, s)
	}
	return out
}

// idle evicts the sessions idle past timeout, and those whose process died between
// runs, and returns them.
func (m *sessions) idle(timeout time.Duration) []*session.Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*session.Session
	for _, s := range m.m {
		if used, idle := s.Idle(); idle && (!s.Process().Alive() || time.Since(used) > timeout) && s.Evict() {
			out = append(out, s)
		}
	}
	return out
}

// retire has evicted sessions saved and stopped, off the caller's path.
func (m *sessions) retire(ss []*session.Session, why string) {
	for _, s := range ss {
		go retire(s, why)
	}
}

// retire has an evicted session saved and stopped.
func retire(s *session.Session, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), retireTimeout)
	defer cancel()
	s.Retire(ctx, why)
}

// evict evicts key's session if it is idle and retires it (its heap saved, then its
// process stopped); false when it was not idle.
func (m *sessions) evict(key, why string) bool {
	s := m.get(key)
	if s == nil || !s.Evict() {
		return false
	}
	retire(s, why)
	return true
}

// checkpoint saves the heap of key's session now, as its delayed checkpoint would.
func (m *sessions) checkpoint(ctx context.Context, key string) error {
	s := m.get(key)
	if s == nil {
		return nil
	}
	return s.Checkpoint(ctx)
}

// closeAll empties the map for shutdown and retires what it held: checkpoints first
// (the sessions come back on any node without replay), within shutdownTimeout.
func (m *sessions) closeAll() {
	m.mu.Lock()
	m.closed = true
	all := m.m
	m.m = map[string]*session.Session{}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Go(func() { s.Retire(ctx, "the sandbox engine is shut down") })
	}
	wg.Wait()
}
