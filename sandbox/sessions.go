package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
)

// live is a session whose interpreter is warm in a process of its own.
type live struct {
	key      string
	p        *proc
	version  int64 // the durable version this interpreter matches
	base     string
	mode     string
	packages []string
	pip      []pkgs.Wheel // what micropip installed, guarded by Engine.mu
	used     time.Time
	busy     bool
	// Files changed by runs that were not saved (a Python error): the next save carries them.
	unsaved    map[string][]byte
	unsavedDel map[string]bool

	// Checkpoints (checkpoint.go), guarded by Engine.mu. heapVersion is the version of
	// the heap saved in Redis; heapStale says that heap no longer applies (the session
	// came back by replay); tainted, that a run failed since the last save, so this heap
	// holds effects the log does not; checkpoint is the pending one, if any.
	heapVersion int64
	heapStale   bool
	tainted     bool
	checkpoint  *time.Timer
	gone        chan struct{} // closed once retired (checkpointed after eviction, then stopped)

	// stateCap is what the session's saved state may hold, as its last run allowed
	// (guarded by Engine.mu); checkpoints keep to it.
	stateCap int64

	// data is /data as the process holds it, name → version (guarded by Engine.mu).
	data map[string]string
}

func newLive(key string, p *proc, base, mode string) *live {
	return &live{key: key, p: p, base: base, mode: mode, unsaved: map[string][]byte{}, unsavedDel: map[string]bool{}}
}

// DataVersions tells which version of each file under /data the warm process of key
// on this node holds, or nil: a caller may then leave those files' Data out.
func (e *Engine) DataVersions(key string) map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	lv := e.live[key]
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
func (e *Engine) dataFor(lv *live, files []File, o *blobs) ([]dataFile, map[string]string, error) {
	e.mu.Lock()
	held := lv.data
	e.mu.Unlock()
	versions := make(map[string]string, len(files))
	out := make([]dataFile, 0, len(files))
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
		out = append(out, dataFile{Name: f.Name, Data: o.add(f.Data)})
	}
	return out, versions, nil
}

// dirty tells whether the saved heap lags this interpreter and a checkpoint can catch it
// up; called with Engine.mu held.
func (lv *live) dirty() bool {
	return lv.mode == modeSnapshot && !lv.tainted && (lv.heapVersion < lv.version || lv.heapStale) && lv.version > 0
}

// claim marks key's live session busy if it is current at version; it returns nil
// (after forgetting a stale or dead one, whose process it closes) when the session has
// to be brought back.
func (e *Engine) claim(key string, version int64) *live {
	e.mu.Lock()
	lv := e.live[key]
	if lv != nil && lv.p.alive() && lv.version == version {
		lv.busy, lv.used = true, time.Now()
		e.mu.Unlock()
		return lv
	}
	if lv != nil {
		delete(e.live, key)
	}
	e.mu.Unlock()
	if lv != nil {
		go lv.p.close("the session moved on")
	}
	return nil
}

// probeTimeout bounds the liveness probe before a warm run; a process that cannot
// answer a stats request in this long on a loaded node is not fit to run code either.
const probeTimeout = 10 * time.Second

// answers tells whether p still runs. A process killed while frozen between runs only
// dies when thawed, so alive() cannot know until something is sent to it: the probe
// thaws it and asks, before any code is given to it.
func (e *Engine) answers(ctx context.Context, p *proc) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	defer cancel()
	_, err := p.call(ctx, statsReq{Op: "stats"}, nil)
	return err == nil
}

// adopt makes lv key's live session, busy, and evicts past MaxLive.
func (e *Engine) adopt(key string, lv *live) {
	lv.busy, lv.used = true, time.Now()
	e.mu.Lock()
	e.live[key] = lv
	e.mu.Unlock()
	e.evictLRU()
}

// release marks lv idle after a run; its process is frozen until the next one.
func (e *Engine) release(lv *live) {
	lv.p.freezeSoon()
	e.mu.Lock()
	lv.busy, lv.used = false, time.Now()
	e.mu.Unlock()
	if e.adm.procs.Waiting() > 0 {
		// Runs wait for a process: this idle one (or an older one) makes room.
		e.reclaim()
	}
}

// dropLive forgets key's live session and kills its process: the next run starts from
// the last durable state.
func (e *Engine) dropLive(key string, lv *live, why string) {
	e.mu.Lock()
	if e.live[key] == lv {
		delete(e.live, key)
	}
	e.mu.Unlock()
	lv.p.close(why)
}

// evictLRU keeps at most MaxLive session processes: the least recently used idle ones
// go, their state being safe in Redis.
func (e *Engine) evictLRU() {
	e.mu.Lock()
	var victims []*live
	for len(e.live) > e.cfg.MaxLive {
		lv := e.forgetOldestIdleLocked()
		if lv == nil {
			break
		}
		victims = append(victims, lv)
	}
	e.mu.Unlock()
	for _, lv := range victims {
		go e.retire(lv, "evicted (least recently used)")
	}
}

// evictOldestIdle forgets the least recently used idle session and returns it for the
// caller to retire, or nil when every live session is busy.
func (e *Engine) evictOldestIdle() *live {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.forgetOldestIdleLocked()
}

func (e *Engine) forgetOldestIdleLocked() *live {
	var old *live
	for _, lv := range e.live {
		if !lv.busy && (old == nil || lv.used.Before(old.used)) {
			old = lv
		}
	}
	if old == nil {
		return nil
	}
	e.forgetLocked(old)
	return old
}

// evictIdle stops the processes of sessions idle past IdleTimeout, and forgets sessions
// whose process died between runs.
func (e *Engine) evictIdle() {
	e.mu.Lock()
	var victims []*live
	for _, lv := range e.live {
		if lv.busy {
			continue
		}
		if !lv.p.alive() || time.Since(lv.used) > e.cfg.IdleTimeout {
			e.forgetLocked(lv)
			victims = append(victims, lv)
		}
	}
	e.mu.Unlock()
	for _, lv := range victims {
		go e.retire(lv, "evicted (idle)")
	}
}

func (e *Engine) liveProcs() []*proc {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*proc, 0, len(e.live))
	for _, lv := range e.live {
		out = append(out, lv.p)
	}
	return out
}

// isLive tells whether key's interpreter is warm at version.
func (e *Engine) isLive(key string, version int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	lv := e.live[key]
	return lv != nil && lv.version == version && lv.p.alive()
}
