package conversations

import (
	"encoding/json"
	"time"

	"github.com/sandchat/sandchat"
)

// Limits on a conversation's files: one upload, all uploads (they are mounted under
// /data for every run), and what its runs may store.
const (
	MaxUploadBytes       = 10 << 20
	MaxConversationBytes = 64 << 20
	// MaxArtifactBytes bounds what a conversation's runs may store as artifacts; past it
	// a run's files are not kept, and its stderr says so.
	MaxArtifactBytes = 256 << 20
)

// UploadTooLarge is the refusal of one file over MaxUploadBytes, with both sizes.
func UploadTooLarge(name string, size int64) error {
	return sandchat.Errorf(sandchat.ETOOLARGE, "%s is %s; uploads are limited to %s per file.", name, sandchat.Size(size), sandchat.Size(MaxUploadBytes))
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

// DataFile is an upload as a run sees it under /data.
type DataFile struct {
	Name string
	// Version changes whenever the content does (a re-upload replaces it in place).
	Version string
	Size    int64
	Data    []byte // nil when the caller already holds this version
}

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
	Displays   json.RawMessage `json:"displays"`
	CreatedAt  time.Time       `json:"created_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
}
