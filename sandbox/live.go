package sandbox

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

// live is a session whose interpreter is warm in a process of its own. It owns its
// state, its lock and its checkpoint timer: the set of sessions (sessions.go) only
// keeps the map of them, and every other part goes through these methods.
//
// A session's life: newLive (busy, for the run that brought it back), then for each run
// claim → dataFor → ran → saveRequest → saved (or taint) → release; off the runs' path,
// armCheckpoint → checkpointDue / beginCheckpoint → checkpointed → endCheckpoint; once
// the set lets go of it (leave), stopCheckpoint for its last checkpoint, then retired.
type live struct {
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

// restored is what attach knows of a session it brought back, for newLive.
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

// newLive is key's session warm in p, as attach brought it back: busy, for the run
// that asked for it.
func newLive(key string, p *proc.Process, r restored) *live {
	return &live{key: key, p: p, base: r.base, gone: make(chan struct{}),
		version: r.version, mode: r.mode, packages: r.packages, pip: r.pip,
		heapVersion: r.heapVersion, heapStale: r.heapStale, partial: r.partial, unlogged: r.unlogged,
		busy: true, used: time.Now(), unsaved: map[string][]byte{}, unsavedDel: map[string]bool{}}
}

// process is the session's process.
func (lv *live) process() *proc.Process { return lv.p }

// name is the session's key.
func (lv *live) name() string { return lv.key }

// baseHash names the base snapshot its heap diffs against.
func (lv *live) baseHash() string { return lv.base }

// claim marks the session busy for a run if its interpreter is current at version.
func (lv *live) claim(version int64) bool {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.out || lv.version != version || !lv.p.Alive() {
		return false
	}
	lv.busy, lv.used = true, time.Now()
	return true
}

// release marks the session idle after a run.
func (lv *live) release() {
	lv.mu.Lock()
	lv.busy, lv.used = false, time.Now()
	lv.mu.Unlock()
}

// idle tells whether no run or checkpoint has the session, and since when it was last
// used.
func (lv *live) idle() (bool, time.Time) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return !lv.busy, lv.used
}

// current tells whether the interpreter is warm at version.
func (lv *live) current(version int64) bool {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.version == version && lv.p.Alive()
}

// leave marks the session let go of by the set: no checkpoint is scheduled on it any
// more, and no run claims it.
func (lv *live) leave() {
	lv.mu.Lock()
	lv.out = true
	lv.mu.Unlock()
}

// info is the session as a run's Result shows it: its version, packages and mode.
func (lv *live) info() SessionInfo {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return SessionInfo{Version: lv.version, Packages: nonNil(lv.packages), Mode: lv.mode}
}

// dataHeld is a copy of what the process holds under /data, name → version, or nil.
func (lv *live) dataHeld() map[string]string {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.data == nil {
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
func (lv *live) dataFor(files []File, o *proc.Blobs) ([]proc.DataFile, map[string]string, error) {
	lv.mu.Lock()
	held := lv.data
	lv.mu.Unlock()
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
// sent, whatever the code then did), its packages, what it did to the working directory
// (kept for the next save, state.TreeOf: what it took away, or changed the kind of, then
// the files, directories and links it made, and its current directory) and, when it did
// not succeed, that the heap holds effects the log does not. It returns the changed paths
// the session cannot keep (too big, or too many).
func (lv *live) ran(r *proc.RunReply, f proc.Frame, data map[string]string) (notKept map[string]bool) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.data, lv.packages = data, r.Packages
	for _, p := range r.Deleted {
		for _, k := range state.PathKeys(p) {
			delete(lv.unsaved, k)
			lv.unsavedDel[k] = true
		}
	}
	keep := func(key string, v []byte) bool {
		if len(lv.unsaved) >= maxSavedFilesPerRun && lv.unsaved[key] == nil {
			return false
		}
		lv.unsaved[key] = v
		delete(lv.unsavedDel, key)
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
		lv.unsaved[state.CwdKey] = []byte(*r.Cwd)
		delete(lv.unsavedDel, state.CwdKey)
	}
	if r.Status != StatusSuccess {
		// A failed run never replaces the last good state; the warm interpreter keeps
		// whatever the run left, like a notebook after an exception, but its heap is no
		// longer the durable state's until the next run that succeeds.
		lv.tainted = true
	}
	return notKept
}

// saveRequest is the save that makes a successful run durable: its cells (those the
// session was rebuilt from, then cell), the files changed since the last save, its
// packages; its Cap is set when the run's budget is reserved, which checkpoints keep to
// after it. heapNow says the heap must be saved with it: a run that failed since the
// last save left effects in this heap that the log does not hold (Python errors are not
// logged), and this run may build on them, so its cell alone would not replay.
func (lv *live) saveRequest(token, build string, packages []string, cell string, budget Budget) (save state.Save, heapNow bool) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	deleted := make([]string, 0, len(lv.unsavedDel))
	for p := range lv.unsavedDel {
		deleted = append(deleted, p)
	}
	pip, _ := json.Marshal(append([]pkgs.Wheel{}, lv.pip...))
	lv.budget = budget
	return state.Save{
		Token: token, From: lv.version, Fresh: lv.version == 0, DropHeap: lv.heapStale, KeepHeap: true,
		Base: lv.base, Build: build, Mode: lv.mode, Packages: packages, Pip: pip,
		Changed: lv.unsaved, Deleted: deleted, Cells: append(append([]string{}, lv.unlogged...), cell),
	}, lv.tainted && !lv.partial && lv.mode == modeSnapshot
}

// saved records that the store holds the session at version: what waited for a save
// is in it.
func (lv *live) saved(version int64) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.version, lv.tainted, lv.heapStale = version, false, false
	lv.unsaved, lv.unsavedDel, lv.unlogged = map[string][]byte{}, map[string]bool{}, nil
}

// taint records that the warm interpreter holds effects its saved state does not (a
// save refused for room), and returns the version that is saved.
func (lv *live) taint() (savedVersion int64) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.tainted = true
	return lv.version
}

// dirtyLocked tells whether the saved heap lags this interpreter and a checkpoint can
// catch it up. Called with lv.mu held.
func (lv *live) dirtyLocked() bool {
	return lv.mode == modeSnapshot && !lv.tainted && !lv.partial && (lv.heapVersion < lv.version || lv.heapStale) && lv.version > 0
}

// armCheckpoint (re)arms the session's checkpoint to run fn after delay, if its saved
// heap lags and the set still holds it.
func (lv *live) armCheckpoint(delay time.Duration, fn func()) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.out || !lv.dirtyLocked() {
		return
	}
	if lv.checkpoint != nil {
		lv.checkpoint.Stop()
	}
	lv.checkpoint = time.AfterFunc(delay, fn)
}

// checkpointDue tells whether the saved heap lags this interpreter.
func (lv *live) checkpointDue() bool {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.dirtyLocked()
}

// beginCheckpoint marks a live session busy for a checkpoint, if the set still holds
// it, no run has it and its saved heap lags; it returns the version to save and the
// budget to keep to.
func (lv *live) beginCheckpoint() (version int64, budget Budget, ok bool) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.out || lv.busy || !lv.dirtyLocked() {
		// Gone (an eviction checkpoints it itself), a run has it (it checkpoints again
		// after), or already caught up.
		return 0, Budget{}, false
	}
	lv.busy, lv.saving = true, make(chan struct{})
	return lv.version, lv.budget, true
}

// endCheckpoint ends what beginCheckpoint began.
func (lv *live) endCheckpoint() {
	lv.mu.Lock()
	lv.busy = false
	close(lv.saving)
	lv.saving = nil
	lv.mu.Unlock()
}

// stopCheckpoint cancels the pending checkpoint of a session the set let go of, and
// tells whether its last one is due: it is idle and its saved heap lags. A checkpoint
// already in flight is waited for (until ctx ends), since its process is about to go:
// stopped under it, it would save nothing. It returns the version to save and the
// budget to keep to.
func (lv *live) stopCheckpoint(ctx context.Context) (version int64, budget Budget, due bool) {
	lv.mu.Lock()
	if lv.checkpoint != nil {
		lv.checkpoint.Stop()
	}
	if saving := lv.saving; saving != nil {
		lv.mu.Unlock()
		select {
		case <-saving:
		case <-ctx.Done():
		}
		lv.mu.Lock()
	}
	defer lv.mu.Unlock()
	return lv.version, lv.budget, !lv.busy && lv.dirtyLocked()
}

// checkpointed records that the store holds this heap as version's, in mode (replay
// when the heap could not be taken), unless a run moved the session on meanwhile.
func (lv *live) checkpointed(version int64, mode string) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.version == version {
		lv.heapVersion, lv.heapStale, lv.mode = version, false, mode
	}
}

// installed is the normalized names of the wheels micropip installed in the session.
func (lv *live) installed() map[string]bool {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	have := make(map[string]bool, len(lv.pip))
	for _, w := range lv.pip {
		have[pkgs.Normalize(w.Name)] = true
	}
	return have
}

// install records wheels micropip installed in the session: its next save keeps them.
func (lv *live) install(ws []pkgs.Wheel) {
	lv.mu.Lock()
	lv.pip = append(lv.pip, ws...)
	lv.mu.Unlock()
}

// retired says the session's process is stopped, to runs waiting for it (retiring).
func (lv *live) retired() { close(lv.gone) }

// retiring is closed once the session is retired.
func (lv *live) retiring() <-chan struct{} { return lv.gone }
