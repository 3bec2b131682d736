package session

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// Session is a session whose interpreter is warm in a process of its own. It owns its
// process, its state, its lock and its checkpoint timer, and the verbs of its life
// (Open, Run, Checkpoint, Retire, Reset); the node only keeps the map of sessions and
// chooses which to retire.
//
// Its life is a state machine (phase, below): Open brings it into a process for the
// run that asked for it (opening → running); a run takes an idle session and leaves it
// idle again (idle ⇄ running), and so does a checkpoint (idle ⇄ checkpointing); the node
// lets go of it (retiring: its last checkpoint, then its process stops) or a run drops
// it (its process failed, or its state moved on), and it is gone for good.
type Session struct {
	// Set once by Open; read without the lock.
	key  string
	env  *Env
	p    *proc.Process
	base string // the base snapshot its heap diffs against

	// mu guards every field below. The node's set of sessions may take it while holding
	// its own lock (to pick an idle session to evict); a session's methods never take the
	// set's lock.
	mu       sync.Mutex
	phase    phase
	changed  chan struct{} // closed, and replaced, at each change of phase
	version  int64         // the durable version this interpreter matches
	mode     string
	packages []string
	pip      []pkgs.Wheel // what micropip installed
	used     time.Time
	// Files changed by runs that were not saved (a Python error): the next save carries them.
	unsaved    map[string][]byte
	unsavedDel map[string]bool
	// unlogged are cells the session was rebuilt from (the caller's history) that its log
	// does not hold yet: the next save logs them ahead of its own cell.
	unlogged []string
	// opened is what the run that opened the session tells of it (how it came back), for
	// that run's Result; Run takes it.
	opened *opened

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

	// budget is its last run's: checkpoints keep to it.
	budget Budget

	// data is /data as the process holds it, name → version.
	data map[string]string
}

// phase is where a session is in its life.
type phase int

const (
	opening       phase = iota // being brought into its process
	idle                       // warm, and nothing has it
	running                    // a run has it
	checkpointing              // its heap is being saved
	retiring                   // the node let go of it: its last checkpoint, then its process stops
	gone                       // its process is stopped: nothing happens to it any more
)

// restored is what Open knows of a session it brought back, for newSession.
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

// newSession is key's session warm in p, as Open brings it back: opening.
func newSession(env *Env, key string, p *proc.Process, r restored) *Session {
	return &Session{key: key, env: env, p: p, base: r.base, changed: make(chan struct{}),
		version: r.version, mode: r.mode, packages: r.packages, pip: r.pip,
		heapVersion: r.heapVersion, heapStale: r.heapStale, partial: r.partial, unlogged: r.unlogged,
		used: time.Now(), unsaved: map[string][]byte{}, unsavedDel: map[string]bool{}}
}

// toLocked moves the session to phase to, and wakes what waits on a change. Called
// with s.mu held.
func (s *Session) toLocked(to phase) {
	s.phase = to
	close(s.changed)
	s.changed = make(chan struct{})
}

// await waits until ok holds (checked with s.mu held) or ctx ends; false when ctx ended.
func (s *Session) await(ctx context.Context, ok func() bool) bool {
	s.mu.Lock()
	for !ok() {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
		s.mu.Lock()
	}
	s.mu.Unlock()
	return true
}

// Process is the session's process.
func (s *Session) Process() *proc.Process { return s.p }

// Idle tells whether the session is idle (nothing has it), and since when.
func (s *Session) Idle() (since time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, s.phase == idle
}

// Live tells whether the session holds a live interpreter (the node has not let go of
// it, and its process runs), and the durable version it matches.
func (s *Session) Live() (version int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, (s.phase == idle || s.phase == running || s.phase == checkpointing) && s.p.Alive()
}

// Evict marks an idle session as let go of by the node, for Retire: no run or
// checkpoint takes it any more. False when it is not idle.
func (s *Session) Evict() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase != idle {
		return false
	}
	s.toLocked(retiring)
	return true
}

// claim takes the idle session for a run if its interpreter is current at version. An
// idle session that is not (another node ran since, or its process is gone) is of no
// use any more: it is dropped.
func (s *Session) claim(version int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase != idle {
		return false
	}
	if s.version != version || !s.p.Alive() {
		s.toLocked(gone)
		go s.p.Close("the session moved on")
		return false
	}
	s.used = time.Now()
	s.toLocked(running)
	return true
}

// hand gives the session to the run that opened it (claimed, or just brought back),
// with what that run tells of it.
func (s *Session) hand(o *opened) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opened = o
	s.used = time.Now()
	if s.phase == opening {
		s.toLocked(running)
	}
}

// takeOpened is what the run's Open told of the session, taken once.
func (s *Session) takeOpened() *opened {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.opened
	s.opened = nil
	return o
}

// release ends a run: the session is idle, its process frozen until the next one.
func (s *Session) release() {
	s.p.FreezeSoon()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used = time.Now()
	if s.phase == running {
		s.toLocked(idle)
	}
}

// drop ends the session at once, without a checkpoint, and stops its process: the next
// run starts from the last durable state.
func (s *Session) drop(why string) {
	s.mu.Lock()
	if s.checkpoint != nil {
		s.checkpoint.Stop()
	}
	if s.phase != gone {
		s.toLocked(gone)
	}
	s.mu.Unlock()
	s.p.Close(why)
}

// info is the session as a run's Result shows it: its version, packages and mode.
func (s *Session) info() SessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SessionInfo{Version: s.version, Packages: nonNil(s.packages), Mode: s.mode}
}

// ran applies what a run that answered left in the session: the /data it mounted (as
// sent, whatever the code then did), its packages, what it did to the working directory
// (kept for the next save, state.TreeOf: what it took away, or changed the kind of, then
// the files, directories and links it made, and its current directory) and, when it did
// not succeed, that the heap holds effects the log does not. It returns the changed paths
// the session cannot keep (too big, or too many).
func (s *Session) ran(r *proc.RunReply, f proc.Frame, data map[string]string) (notKept map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data, s.packages = data, r.Packages
	for _, p := range r.Deleted {
		for _, k := range state.PathKeys(p) {
			delete(s.unsaved, k)
			s.unsavedDel[k] = true
		}
	}
	keep := func(key string, v []byte) bool {
		if len(s.unsaved) >= maxSavedFilesPerRun && s.unsaved[key] == nil {
			return false
		}
		s.unsaved[key] = v
		delete(s.unsavedDel, key)
		return true
	}
	for _, ch := range r.Changed {
		// Redis is no place for big files: they live on in the warm session only.
		if ch.Data == nil || !keep(ch.Path, f.Bytes(ch.Data)) {
			if notKept == nil {
				notKept = map[string]bool{}
			}
			notKept[ch.Path] = true
		}
	}
	for _, d := range r.Dirs {
		keep(state.DirKey(d), []byte{})
	}
	for _, l := range r.Links {
		keep(state.LinkKey(l.Path), []byte(l.Target))
	}
	if r.Cwd != nil {
		s.unsaved[state.CwdKey] = []byte(*r.Cwd)
		delete(s.unsavedDel, state.CwdKey)
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
// heap lags and the node still holds it.
func (s *Session) armCheckpoint(delay time.Duration, fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase >= retiring || !s.dirtyLocked() {
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

// beginCheckpoint takes an idle session for a checkpoint, if its saved heap lags; it
// returns the version to save and the budget to keep to.
func (s *Session) beginCheckpoint() (version int64, budget Budget, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase != idle || !s.dirtyLocked() {
		// Let go of (its retirement checkpoints it), a run has it (it checkpoints again
		// after), or already caught up.
		return 0, Budget{}, false
	}
	s.toLocked(checkpointing)
	return s.version, s.budget, true
}

// endCheckpoint ends what beginCheckpoint began: the session is idle again.
func (s *Session) endCheckpoint() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase == checkpointing {
		s.toLocked(idle)
	}
}

// retire moves the session to retiring, once a checkpoint in flight has ended (until
// ctx ends: its process is about to go, and stopped under it, it would save nothing).
// It cancels the pending checkpoint and tells whether the last one is due: the session
// was idle and its saved heap lags, with the version to save and the budget to keep to.
func (s *Session) retire(ctx context.Context) (version int64, budget Budget, due bool) {
	s.await(ctx, func() bool { return s.phase != checkpointing })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checkpoint != nil {
		s.checkpoint.Stop()
	}
	was := s.phase
	if was == gone {
		return 0, Budget{}, false
	}
	s.toLocked(retiring)
	return s.version, s.budget, (was == idle || was == retiring) && s.dirtyLocked()
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

// stopped ends the session: its process is stopped.
func (s *Session) stopped() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase != gone {
		s.toLocked(gone)
	}
}
