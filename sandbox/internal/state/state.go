// Package state holds what a session keeps between runs, as the engine and its stores
// exchange it: the engine decides what to save, a store (sandbox/redisstore) keeps it.
package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// How a session's interpreter is saved.
const (
	ModeSnapshot = "snapshot" // a heap, diffed against the shared base
	ModeReplay   = "replay"   // no heap (compiled extensions, JS objects): the cells are run again
)

// LeaseTTL is how long, by default, a node that died keeps a session's lease: a live
// node renews it every third of it, so a dead one's run is taken over in seconds. A node
// that stands still longer (a paused VM, a starved process: a loaded machine stalled one
// for over 4 s) loses its leases (Config.LeaseTTL).
const LeaseTTL = 10 * time.Second

// State is what survives a process, a server restart or a move to another node.
type State struct {
	Version int64
	Base    string // content hash of the base snapshot the delta is against
	Build   string
	Mode    string // ModeSnapshot or ModeReplay
	Header  []byte // the snapshot's own header (its length varies between snapshots)
	Delta   []byte // the heap pages that differ from the base, XOR-ed, zstd-compressed (its frame says its length)
	// HeapVersion is the version the heap was checkpointed at; Tail holds the cells run
	// since, which a restore replays on top of it (the log is durable, the heap lazy).
	HeapVersion int64
	Tail        []string
	Packages    []string
	Pip         json.RawMessage // the wheels installed with micropip, as the engine wrote them
	Cells       []string
	Files       map[string][]byte
	Updated     time.Time
}

// Save is one run's change to a session's state.
type Save struct {
	Token    string
	From     int64 // version the run started from
	Fresh    bool  // the session started over: forget old files and cells
	Base     string
	Build    string
	Mode     string
	Header   []byte
	Delta    []byte // compressed by the engine (see State.Delta); the store keeps it as it is
	Packages []string
	Pip      json.RawMessage
	Changed  map[string][]byte
	Deleted  []string
	Cells    []string // appended to the replay log
	Cap      int64    // the most the session's state may hold, in bytes
	// KeepHeap leaves the saved heap as it is: the run is durable by the replay log, and
	// a checkpoint saves the heap later, off the run's path.
	KeepHeap bool
	DropHeap bool // the saved heap is stale (the session came back by replay): forget it
}

// Checkpoint is a session's heap taken between runs, at Version.
type Checkpoint struct {
	Token   string // the lease held, or empty for a session no run can reach (being evicted)
	Version int64
	Base    string
	Build   string
	Mode    string
	Header  []byte
	Delta   []byte // compressed by the engine (see State.Delta); the store keeps it as it is
	Cap     int64
}

// ErrFenced is a save refused because the lease was lost or another run changed the
// state since this one started: a stale node never overwrites a newer state.
var ErrFenced = errors.New("session lease lost or state changed by another run")

// Full is a save refused because the session's state would pass its cap, or (Hot) keep
// more than the hot store's bound.
type Full struct {
	Total, Cap int64
	Hot        bool
}

func (e *Full) Error() string {
	if e.Hot {
		return fmt.Sprintf("the session's state would keep %.1f MiB in Redis, over its %.1f MiB bound (its replay log and small files)", float64(e.Total)/(1<<20), float64(e.Cap)/(1<<20))
	}
	return fmt.Sprintf("the session's saved state would be %.1f MiB, over its %.1f MiB limit", float64(e.Total)/(1<<20), float64(e.Cap)/(1<<20))
}

// NewToken returns a random lease token.
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Cold keeps what is too large for the hot store (a session's heap, its larger files):
// blobs named by their content hash within a session, where storage is cheap. The hot
// store holds only their names and sizes.
type Cold interface {
	// Put stores a blob of session under hash (its content's); storing one it holds
	// again only marks it as in use.
	Put(ctx context.Context, session, hash string, data []byte) error
	// Get returns a blob; an error when it is missing.
	Get(ctx context.Context, session, hash string) ([]byte, error)
	// Keep drops session's blobs other than keep and marks those as in use.
	Keep(ctx context.Context, session string, keep []string) error
}
