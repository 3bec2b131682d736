package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// Session is a session whose interpreter is warm in a process of its own. It owns its
// state, its lock and its checkpoint timer: the set of sessions (sessions.go) only
// keeps the map of them, and every other part goes through these methods.
//
// A session's life: newSession (busy, for the run that brought it back), then for each run
// Claim → dataFor → ran → saveRequest → saved (or taint) → release; off the runs' path,
// armCheckpoint → checkpointDue / beginCheckpoint → checkpointed → endCheckpoint; once
// the set lets go of it (leave), stopCheckpoint for its last checkpoint, then retired.
type Session struct {
	// Set once by newLive; read without the lock.
	key  string
	p    *proc.Process
	base string        // the base snapshot its heap diffs against
	gone chan struct{} // closed by retired, once its process is stopped

	// mu guards every field below. The set of sessions may take it while holding its own
	// lock (to pick a session to evict, or claim one atomically); a session's methods
	// never take the set's lock.
	mu       sync.Mutex
	version  int64 // the durable version this interpreter matches
	mode     string
	packages []string
	pip      []pkgs.Wheel // what micropip installed
	used     time.Time
	busy     bool // a run or a checkpoint has it
	out      bool // the set let go of it (evicted, dropped, reset, shut down): nothing is scheduled on it any more
	// Files changed by runs that were not saved (a Python error): the next save carries them.
	unsaved    map[string][]byte
	unsavedDel map[string]bool
	// unlogged are cells the session was rebuilt from (the caller's history) that its log
	// does not hold yet: the next save logs them ahead of its own cell.
	unlogged []string

	// Checkpoints (checkpoint.go). heapVersion is the version of the heap saved in
	// Redis; heapStale says that heap no longer applies (the session came back by
	// replay); tainted, that a run failed since the last save, so this heap holds effects
	// the log does not; checkpoint is the pending one, if any.
	heapVersion int64
	heapStale   bool
	tainted     bool
	// partial: the session came back without all of its logged cells (one failed to
	// replay), so this heap is never saved as its state: the log stays whole.
	partial    bool
	checkpoint *time.Timer
	// saving is closed when the checkpoint in flight ends (nil: none is).
	saving chan struct{}

	// budget is its last run's: checkpoints keep to it.
	budget Budget

	// data is /data as the process holds it, name → version.
	data map[string]string
}

// restored is what open knows of a session it brought back, for newLive.
type restored struct {
	base, mode  string
	version     int64
	packages    []string
	pip         []pkgs.Wheel
	heapVersion int64
	heapStale   bool
	partial     bool
	unlogged    []string
}

// newSession is key's session warm in p, as attach brought it back: busy, for the run
// that asked for it.
func newSession(key string, p *proc.Process, r restored) *Session {
	return &Session{key: key, p: p, base: r.base, gone: make(chan struct{}),
		version: r.version, mode: r.mode, packages: r.packages, pip: r.pip,
		heapVersion: r.heapVersion, heapStale: r.heapStale, partial: r.partial, unlogged: r.unlogged,
		busy: true, used: time.Now(), unsaved: map[string][]byte{}, unsavedDel: map[string]bool{}}
}

// Process is the session's process.
func (s *Session) Process() *proc.Process { return s.p }

// Key is the session's key.
func (s *Session) Key() string { return s.key }

// baseHash names the base snapshot its heap diffs against.
func (s *Session) baseHash() string { return s.base }

// Claim marks the session busy for a run if its interpreter is current at version.
func (s *Session) Claim(version int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out || s.version != version || !s.p.Alive() {
		return false
	}
	s.busy, s.used = true, time.Now()
	return true
}

// Release marks the session idle after a run.
func (s *Session) Release() {
	s.mu.Lock()
	s.busy, s.used = false, time.Now()
	s.mu.Unlock()
}

// Idle tells whether no run or checkpoint has the session, and since when it was last
// used.
func (s *Session) Idle() (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.busy, s.used
}

// Current tells whether the interpreter is warm at version.
func (s *Session) Current(version int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version == version && s.p.Alive()
}

// Leave marks the session let go of by the set: no checkpoint is scheduled on it any
// more, and no run claims it.
func (s *Session) Leave() {
	s.mu.Lock()
	s.out = true
	s.mu.Unlock()
}

// Info is the session as a run's Result shows it: its version, packages and mode.
func (s *Session) Info() SessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SessionInfo{Version: s.version, Packages: nonNil(s.packages), Mode: s.mode}
}

// DataHeld is a copy of what the process holds under /data, name → version, or nil.
func (s *Session) DataHeld() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		return nil
	}
	out := make(map[string]string, len(s.data))
	for n, v := range s.data {
		out[n] = v
	}
	return out
}

// dataFor is what a run must send of files for /data: the versions of all, the bytes
// of those the process does not hold. ErrDataStale when one of those came without them.
func (s *Session) dataFor(files []File, o *proc.Blobs) ([]proc.DataFile, map[string]string, error) {
	s.mu.Lock()
	held := s.data
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

// ran applies what a run that answered left in the session: the /data it mounted (as
// sent, whatever the code then did), its packages, the files it changed or deleted (kept
// for the next save) and, when it did not succeed, that the heap holds effects the log
// does not. It returns the changed paths the session cannot keep (too big, or too many).
func (s *Session) ran(r *proc.RunReply, f proc.Frame, data map[string]string) (notKept map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data, s.packages = data, r.Packages
	for _, ch := range r.Changed {
		if ch.Data == nil || (len(s.unsaved) >= maxSavedFilesPerRun && s.unsaved[ch.Path] == nil) {
			// Redis is no place for big files: they Session on in the warm session only.
			if notKept == nil {
				notKept = map[string]bool{}
			}
			notKept[ch.Path] = true
			continue
		}
		s.unsaved[ch.Path] = f.Bytes(ch.Data)
		delete(s.unsavedDel, ch.Path)
	}
	for _, p := range r.Deleted {
		delete(s.unsaved, p)
		s.unsavedDel[p] = true
	}
	if r.Status != StatusSuccess {
		// A failed run never replaces the last good state; the warm interpreter keeps
		// whatever the run left, like a notebook after an exception, but its heap is no
		// longer the durable state's until the next run that succeeds.
		s.tainted = true
	}
	return notKept
}

// saveRequest is the save that makes a successful run durable: its cells (those the
// session was rebuilt from, then cell), the files changed since the last save, its
// packages; its Cap is set when the run's budget is reserved, which checkpoints keep to
// after it. heapNow says the heap must be saved with it: a run that failed since the
// last save left effects in this heap that the log does not hold (Python errors are not
// logged), and this run may build on them, so its cell alone would not replay.
func (s *Session) saveRequest(token, build string, packages []string, cell string, budget Budget) (save state.Save, heapNow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	deleted := make([]string, 0, len(s.unsavedDel))
	for p := range s.unsavedDel {
		deleted = append(deleted, p)
	}
	pip, _ := json.Marshal(append([]pkgs.Wheel{}, s.pip...))
	s.budget = budget
	return state.Save{
		Token: token, From: s.version, Fresh: s.version == 0, DropHeap: s.heapStale, KeepHeap: true,
		Base: s.base, Build: build, Mode: s.mode, Packages: packages, Pip: pip,
		Changed: s.unsaved, Deleted: deleted, Cells: append(append([]string{}, s.unlogged...), cell),
	}, s.tainted && !s.partial && s.mode == modeSnapshot
}

// saved records that the store holds the session at version: what waited for a save
// is in it.
func (s *Session) saved(version int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version, s.tainted, s.heapStale = version, false, false
	s.unsaved, s.unsavedDel, s.unlogged = map[string][]byte{}, map[string]bool{}, nil
}

// taint records that the warm interpreter holds effects its saved state does not (a
// save refused for room), and returns the version that is saved.
func (s *Session) taint() (savedVersion int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tainted = true
	return s.version
}

// dirtyLocked tells whether the saved heap lags this interpreter and a checkpoint can
// catch it up. Called with s.mu held.
func (s *Session) dirtyLocked() bool {
	return s.mode == modeSnapshot && !s.tainted && !s.partial && (s.heapVersion < s.version || s.heapStale) && s.version > 0
}

// armCheckpoint (re)arms the session's checkpoint to run fn after delay, if its saved
// heap lags and the set still holds it.
func (s *Session) armCheckpoint(delay time.Duration, fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out || !s.dirtyLocked() {
		return
	}
	if s.checkpoint != nil {
		s.checkpoint.Stop()
	}
	s.checkpoint = time.AfterFunc(delay, fn)
}

// checkpointDue tells whether the saved heap lags this interpreter.
func (s *Session) checkpointDue() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dirtyLocked()
}

// beginCheckpoint marks a Session session busy for a checkpoint, if the set still holds
// it, no run has it and its saved heap lags; it returns the version to save and the
// budget to keep to.
func (s *Session) beginCheckpoint() (version int64, budget Budget, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out || s.busy || !s.dirtyLocked() {
		// Gone (an eviction checkpoints it itself), a run has it (it checkpoints again
		// after), or already caught up.
		return 0, Budget{}, false
	}
	s.busy, s.saving = true, make(chan struct{})
	return s.version, s.budget, true
}

// endCheckpoint ends what beginCheckpoint began.
func (s *Session) endCheckpoint() {
	s.mu.Lock()
	s.busy = false
	close(s.saving)
	s.saving = nil
	s.mu.Unlock()
}

// stopCheckpoint cancels the pending checkpoint of a session the set let go of, and
// tells whether its last one is due: it is idle and its saved heap lags. A checkpoint
// already in flight is waited for (until ctx ends), since its process is about to go:
// stopped under it, it would save nothing. It returns the version to save and the
// budget to keep to.
func (s *Session) stopCheckpoint(ctx context.Context) (version int64, budget Budget, due bool) {
	s.mu.Lock()
	if s.checkpoint != nil {
		s.checkpoint.Stop()
	}
	if saving := s.saving; saving != nil {
		s.mu.Unlock()
		select {
		case <-saving:
		case <-ctx.Done():
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	return s.version, s.budget, !s.busy && s.dirtyLocked()
}

// checkpointed records that the store holds this heap as version's, in mode (replay
// when the heap could not be taken), unless a run moved the session on meanwhile.
func (s *Session) checkpointed(version int64, mode string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.version == version {
		s.heapVersion, s.heapStale, s.mode = version, false, mode
	}
}

// installed is the normalized names of the wheels micropip installed in the session.
func (s *Session) installed() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	have := make(map[string]bool, len(s.pip))
	for _, w := range s.pip {
		have[pkgs.Normalize(w.Name)] = true
	}
	return have
}

// install records wheels micropip installed in the session: its next save keeps them.
func (s *Session) install(ws []pkgs.Wheel) {
	s.mu.Lock()
	s.pip = append(s.pip, ws...)
	s.mu.Unlock()
}

// Retired says the session's process is stopped, to runs waiting for it (retiring).
func (s *Session) Retired() { close(s.gone) }

// Retiring is closed once the session is retired.
func (s *Session) Retiring() <-chan struct{} { return s.gone }
