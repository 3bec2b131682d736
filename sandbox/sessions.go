package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// live is a session whose interpreter is warm in a process of its own.
type live struct {
	key      string
	p        *proc.Process
	version  int64 // the durable version this interpreter matches
	base     string
	mode     string
	packages []string
	pip      []pkgs.Wheel // what micropip installed, guarded by sessions.mu
	used     time.Time
	busy     bool
	// Files changed by runs that were not saved (a Python error): the next save carries them.
	unsaved    map[string][]byte
	unsavedDel map[string]bool
	// unlogged are cells the session was rebuilt from (the caller's history) that its log
	// does not hold yet: the next save logs them ahead of its own cell.
	unlogged []string

	// Checkpoints (checkpoint.go), guarded by sessions.mu. heapVersion is the version of
	// the heap saved in Redis; heapStale says that heap no longer applies (the session
	// came back by replay); tainted, that a run failed since the last save, so this heap
	// holds effects the log does not; checkpoint is the pending one, if any.
	heapVersion int64
	heapStale   bool
	tainted     bool
	// partial: the session came back without all of its logged cells (one failed to
	// replay), so this heap is never saved as its state: the log stays whole.
	partial    bool
	checkpoint *time.Timer
	gone       chan struct{} // closed once retired (checkpointed after eviction, then stopped)

	// stateCap is what the session's saved state may hold, as its last run allowed
	// (guarded by sessions.mu); checkpoints keep to it.
	stateCap int64

	// data is /data as the process holds it, name → version (guarded by sessions.mu).
	data map[string]string
}

func newLive(key string, p *proc.Process, base, mode string) *live {
	return &live{key: key, p: p, base: base, mode: mode, unsaved: map[string][]byte{}, unsavedDel: map[string]bool{}}
}

// sessions is the set of this node's live sessions and of those being retired (evicted,
// checkpointed before their process stops). Its lock guards the set and the fields of
// each live session marked so; it is never held while waiting on a process or a store.
type sessions struct {
	mu       sync.Mutex
	m        map[string]*live
	retiring map[string]*live
	closed   bool // shut down: nothing is scheduled on a session any more
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
	delete(s.m, key)
	return lv
}

// forgetLocked takes lv out of the live set for retiring; a run of its key waits for the
// retirement (checkpoints.awaitRetired), so it finds the checkpoint made. Called with s.mu held.
func (s *sessions) forgetLocked(lv *live) {
	delete(s.m, lv.key)
	lv.gone = make(chan struct{})
	s.retiring[lv.key] = lv
}

// retired ends lv's retirement.
func (s *sessions) retired(lv *live) {
	s.mu.Lock()
	if s.retiring[lv.key] == lv {
		delete(s.retiring, lv.key)
	}
	s.mu.Unlock()
	if lv.gone != nil {
		close(lv.gone)
	}
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
	for _, lv := range s.m {
		if !lv.busy && (old == nil || lv.used.Before(old.used)) {
			old = lv
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
		if !lv.busy && (!lv.p.Alive() || time.Since(lv.used) > timeout) {
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
		out = append(out, lv.p)
	}
	return out
}

// isLive tells whether key's interpreter is warm at version.
func (s *sessions) isLive(key string, version int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	lv := s.m[key]
	return lv != nil && lv.version == version && lv.p.Alive()
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
	}
	return out
}

// dataVersions is the version of each file under /data that key's process holds, or nil.
func (s *sessions) dataVersions(key string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lv := s.m[key]
	if lv == nil || lv.data == nil {
		return nil
	}
	out := make(map[string]string, len(lv.data))
	for n, v := range lv.data {
		out[n] = v
	}
	return out
}

// dataFor is what a run must send of files for /data: the versions of all, the bytes
// of those the process does not hold. ErrDataStale when one of those came without them.
func (s *sessions) dataFor(lv *live, files []File, o *proc.Blobs) ([]proc.DataFile, map[string]string, error) {
	s.mu.Lock()
	held := lv.data
	s.mu.Unlock()
	versions := make(map[string]string, len(files))
	out := make([]proc.DataFile, 0, len(files))
	for _, f := range files {
		v := f.Version
		if v == "" {
			sum := sha256.Sum256(f.Data)
			v = hex.EncodeToString(sum[:])
		}
		versions[f.Name] = v
		if held != nil && held[f.Name] == v {
			continue
		}
		if f.Data == nil {
			return nil, nil, ErrDataStale
		}
		out = append(out, proc.DataFile{Name: f.Name, Data: o.Add(f.Data)})
	}
	return out, versions, nil
}

// dirty tells whether the saved heap lags this interpreter and a checkpoint can catch it
// up; called with sessions.mu held.
func (lv *live) dirty() bool {
	return lv.mode == modeSnapshot && !lv.tainted && !lv.partial && (lv.heapVersion < lv.version || lv.heapStale) && lv.version > 0
}

// adopt makes lv key's live session, busy; false once the engine is shut down, when
// nothing would ever stop lv's process.
func (s *sessions) adopt(key string, lv *live) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	lv.busy, lv.used = true, time.Now()
	s.m[key] = lv
	return true
}

// idleNow marks lv idle after a run.
func (s *sessions) idleNow(lv *live) {
	s.mu.Lock()
	lv.busy, lv.used = false, time.Now()
	s.mu.Unlock()
}

// claim marks key's live session busy if it is current at version; it returns nil
// (after forgetting a stale or dead one, whose process it closes) when the session has
// to be brought back.
func (s *sessions) claim(key string, version int64) *live {
	s.mu.Lock()
	lv := s.m[key]
	if lv != nil && lv.p.Alive() && lv.version == version {
		lv.busy, lv.used = true, time.Now()
		s.mu.Unlock()
		return lv
	}
	if lv != nil {
		delete(s.m, key)
	}
	s.mu.Unlock()
	if lv != nil {
		go lv.p.Close("the session moved on")
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
	s.mu.Unlock()
	lv.p.Close(why)
}
