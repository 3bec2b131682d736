package conversations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sandchat/sandchat"
)

// Limits on a conversation's files. Everything a conversation stores (its uploads, the
// files its runs made, and the Python state of its sessions) counts against one quota
// (Quota, a setting; DefaultQuota unless configured). Within it, one upload is at most
// MaxUploadBytes and all uploads together at most MaxConversationBytes: every run mounts
// the uploads under /data, so they are read into the session's process on each run
// whatever room the quota leaves, and the engine bounds what one run may mount.
// Artifacts have no total of their own: the quota is theirs.
const (
	MaxUploadBytes       = 10 << 20
	MaxConversationBytes = 64 << 20
	DefaultQuota         = 256 << 20
)

// ErrOverQuota is in the chain of a write refused because the conversation's storage
// is full (its quota, or the total its uploads may take), beside the error that says
// so to the caller with the sizes.
var ErrOverQuota = errors.New("the conversation's storage quota is full")

// UploadTooLarge is the refusal of one file over MaxUploadBytes, with both sizes.
func UploadTooLarge(name string, size int64) error {
	return sandchat.Errorf(sandchat.ETOOLARGE, "%s is %s; uploads are limited to %s per file.", name, sandchat.Size(size), sandchat.Size(MaxUploadBytes))
}

// Quota is a conversation's storage quota as a store applies it to the files it keeps:
// Limit bounds uploads, artifacts and the state of the conversation's Python sessions
// together. The store does not see that state (the engine keeps it): it asks State,
// under the conversation's quota lock, so no other write counted against the quota
// lands between the read and its own.
type Quota struct {
	Limit int64
	State SessionState // nil: the conversation has no Python state
}

// SessionState reads what a conversation's Python sessions hold now, given what the
// store read of its files under the quota lock (their SessionKeys name the sessions).
type SessionState func(ctx context.Context, files FileUsage) (int64, error)

// Storage is what the conversation holds against q, its files as read (under the quota
// lock) and its sessions' state read now.
func (q Quota) Storage(ctx context.Context, files FileUsage) (Storage, error) {
	var state int64
	if q.State != nil {
		var err error
		if state, err = q.State(ctx, files); err != nil {
			return Storage{}, err
		}
	}
	return NewStorage(files.Uploads, files.Artifacts, state, q.Bytes()), nil
}

// Bytes is the quota's limit; an unset one is DefaultQuota.
func (q Quota) Bytes() int64 {
	if q.Limit <= 0 {
		return DefaultQuota
	}
	return q.Limit
}

// FileUsage is what a conversation's files take, and the Python sessions its runs used
// (whose state counts against its quota too).
type FileUsage struct {
	Uploads     int64
	Artifacts   int64
	SessionKeys []string
}

// Storage is what a conversation holds against its quota.
type Storage struct {
	Uploads   int64 `json:"uploads"`
	Artifacts int64 `json:"artifacts"`
	State     int64 `json:"state"` // the Python state of all its sessions
	Used      int64 `json:"used"`
	Quota     int64 `json:"quota"`
}

// NewStorage adds up a conversation's usage.
func NewStorage(uploads, artifacts, state, quota int64) Storage {
	return Storage{Uploads: uploads, Artifacts: artifacts, State: state, Used: uploads + artifacts + state, Quota: quota}
}

// String is the usage as refusals state it: "uploads 6 MiB + artifacts 0 bytes + Python
// state 1.2 MiB = 7.2 MiB of its 8 MiB quota".
func (s Storage) String() string {
	return fmt.Sprintf("uploads %s + artifacts %s + Python state %s = %s of its %s quota",
		sandchat.Size(s.Uploads), sandchat.Size(s.Artifacts), sandchat.Size(s.State), sandchat.Size(s.Used), sandchat.Size(s.Quota))
}

// FileRef names a stored file: uploads and artifacts alike.
type FileRef struct {
	ID          int64  `json:"id"`
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
}

// StoredFile is a file with where it came from.
type StoredFile struct {
	FileRef
	ConversationID int64  `json:"conversation_id"`
	Source         string `json:"source"`
	ExecutionID    *int64 `json:"execution_id,omitempty"`
}

// FileReader reads a stored file's bytes from where they are kept, a part at a time, as
// of the moment it was opened (StoredFile.Size of them), until it is closed.
type FileReader interface {
	io.ReaderAt
	io.Closer
}

// DataFile is an upload as a run sees it under /data.
type DataFile struct {
	Name string
	// Version changes whenever the content does (a re-upload replaces it in place).
	Version string
	Size    int64
	Data    []byte // nil when the caller already holds this version
}

// RunLostWithServer is why a run left pending by a server that stopped is recorded
// failed when another server fails its turn. The run's effects are only in the session
// if its state was saved before the stop; replay never applies it.
const RunLostWithServer = "The server running this code stopped (crash, kill or restart) before the run's outcome was recorded, " +
	"and its turn failed. The session keeps what the run did only if its state was saved before the stop: check before running it again."

// Execution is the audit record of one run of the conversation's Python: who ran what
// in which session, and once finished, its outcome and the session it left.
type Execution struct {
	ConversationID int64
	TurnID         *int64
	AgentID        *int64
	SessionKey     string
	Code           string
	Outcome        sandchat.RunOutcome
	SessionVersion int64
	RestoredFrom   string
	// Quota is the conversation's quota as the run ended, with what its sessions' state
	// held then: the room its artifacts must fit in.
	Quota Quota
}

// StoredExecution is a run as recorded, with its whole output.
type StoredExecution struct {
	ID             int64           `json:"id"`
	ConversationID int64           `json:"conversation_id"`
	TurnID         *int64          `json:"turn_id"`
	AgentID        *int64          `json:"agent_id"`
	Status         string          `json:"status"`
	Code           string          `json:"code"`
	Stdout         string          `json:"stdout"`
	Stderr         string          `json:"stderr"`
	Result         *string         `json:"result"`
	Error          json.RawMessage `json:"error,omitempty"`
	ExecutionMS    int64           `json:"execution_ms"`
	SessionVersion *int64          `json:"session_version,omitempty"`
	RestoredFrom   *string         `json:"restored_from,omitempty"`
	Artifacts      []FileRef       `json:"artifacts"`
	// Displays are the run's display items as shown: text parts, and images as file ids.
	Displays json.RawMessage `json:"displays"`
	// Order is the order its output was written in (sandchat.RunOutcome.Order), when kept.
	Order      json.RawMessage `json:"order,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
}
