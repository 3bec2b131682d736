package sandbox

import "github.com/sandchat/sandchat/sandbox/internal/session"

// The types of a run, as the session (internal/session) defines them.
type (
	Request     = session.Request
	Budget      = session.Budget
	File        = session.File
	Result      = session.Result
	SessionInfo = session.SessionInfo
)

// Run statuses (sandchat.RunOutcome's).
const (
	StatusSuccess = session.StatusSuccess
	StatusError   = session.StatusError
	StatusTimeout = session.StatusTimeout
)

// Where a session's interpreter came from for a run.
const (
	FromLive     = session.FromLive
	FromSnapshot = session.FromSnapshot
	FromReplay   = session.FromReplay
	FromFresh    = session.FromFresh
)

// Status is the engine's health, for /api/v1/sandbox/status and `sandchat doctor`.
type Status struct {
	Available bool          `json:"available"`
	Reason    string        `json:"reason,omitempty"`
	Isolation string        `json:"isolation,omitempty"` // what confines each session process
	Deno      DenoStatus    `json:"deno"`
	Pyodide   PyodideStatus `json:"pyodide"`
	Processes int           `json:"processes"` // session processes: live, warm and spare
	// MaxProcesses bounds Processes (and those starting); Waiting is how many runs wait
	// for room under it.
	MaxProcesses int    `json:"max_processes"`
	Waiting      int    `json:"admission_waiting"`
	LiveSess     int    `json:"live_sessions"`
	WarmPool     int    `json:"warm_pool"`
	Spares       int    `json:"spares"`
	BaseHash     string `json:"base_hash,omitempty"`
	// SessionMemory is what each live session's process holds (its cgroup's charge).
	SessionMemory []int64      `json:"session_memory_bytes,omitempty"`
	Limits        StatusLimits `json:"limits"`
	// UserWaiting is how many runs wait for their user's share of the node (admission.go).
	UserWaiting int `json:"admission_user_waiting"`
}

type DenoStatus struct {
	Installed bool   `json:"installed"`
	Version   string `json:"version,omitempty"`
	Path      string `json:"path,omitempty"`
}

type PyodideStatus struct {
	Installed bool   `json:"installed"`
	Version   string `json:"version,omitempty"`
	Path      string `json:"path,omitempty"`
}

type StatusLimits struct {
	TimeoutMS    int64 `json:"timeout_ms"`
	MaxTimeoutMS int64 `json:"max_timeout_ms"`
	MemoryBytes  int64 `json:"memory_bytes"`
	// ProcessMemoryBytes is the kernel's cap on a whole session process.
	ProcessMemoryBytes int64    `json:"process_memory_bytes,omitempty"`
	MaxStateBytes      int64    `json:"max_state_bytes"`
	IdleTimeoutMS      int64    `json:"idle_timeout_ms"`
	MaxOutput          int      `json:"max_output"`
	MaxCode            int      `json:"max_code"`
	NetworkAllow       []string `json:"network_allow"`
	// Pip says whether micropip.install can fetch pure-Python wheels (through the server).
	Pip bool `json:"pip"`
}

// CheckPreload tells whether mods can be a preload list: at most 64 module names
// (dotted identifiers), each imported before a run's code.
func CheckPreload(mods []string) error { return session.CheckPreload(mods) }
