package conversations

import (
	"encoding/json"
	"time"

	"github.com/sandchat/sandchat"
)

// Message is one stored message of a conversation: the user's, an agent's, or a tool
// result. Tool calls and results stay structured, never flattened into text.
type Message struct {
	ID             int64           `json:"id"`
	ConversationID int64           `json:"conversation_id"`
	TurnID         *int64          `json:"turn_id,omitempty"`
	Role           string          `json:"role"`
	UserID         *int64          `json:"user_id,omitempty"`
	AgentID        *int64          `json:"agent_id,omitempty"`
	AgentPath      []string        `json:"agent_path"`
	Content        string          `json:"content"`
	ToolCalls      json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID     string          `json:"tool_call_id,omitempty"`
	// A user message's answers are versions: Versions are the turns that answered it,
	// oldest first (Regenerate and Edit each add one), and AnswerTurnID the current one,
	// which the page shows and models see.
	AnswerTurnID *int64    `json:"answer_turn_id,omitempty"`
	Versions     []int64   `json:"versions,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
}

// Turn is one run of the assistant, started by a user message.
type Turn struct {
	ID             int64      `json:"id"`
	ConversationID int64      `json:"conversation_id"`
	Status         string     `json:"status"`
	Error          string     `json:"error,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	FinishedAt     *time.Time `json:"finished_at,omitempty"`
	// StartedSeq is the seq of the turn's turn.started event, given while it runs: a
	// client that opens the conversation mid-turn subscribes with since StartedSeq-1 to
	// get the whole turn so far (output printed before it came included), then live.
	StartedSeq *int64 `json:"started_seq,omitempty"`
	// Usage is the LLM tokens the turn used, summed over its model calls; absent when
	// no model reported any (the builtin model, an endpoint that does not).
	Usage *Usage `json:"usage,omitempty"`
}

// Usage is what model calls cost in tokens, as their endpoint reported it.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// Turn statuses.
const (
	TurnRunning   = "running"
	TurnCompleted = "completed"
	TurnFailed    = "failed"
	TurnCancelled = "cancelled"
)

// Handoff statuses: a swarm child's part of a turn.
const (
	HandoffStarted   = "started"
	HandoffCompleted = "completed"
	HandoffFailed    = "failed"
)

// Event types of turns.
const (
	EventTurnStarted      = "turn.started"
	EventTurnCompleted    = "turn.completed"
	EventTurnFailed       = "turn.failed"
	EventMessageCreated   = "message.created"
	EventMessageUpdated   = "message.updated" // a user message edited, answered again, or its answer version switched
	EventMessageDelta     = "message.delta"
	EventMessageCompleted = "message.completed"
	EventToolStarted      = "tool.started"
	EventToolOutput       = "tool.output"
	EventToolCompleted    = "tool.completed"
	EventToolDisplay      = "tool.display" // one display item of a run, while it runs
	EventAgentHandoff     = "agent.handoff"
)

// Fence names the runner of a turn: every write of the turn checks, in the statement
// that locks the turn's row, that the turn still runs and still belongs to Owner. A
// runner that lost its turn (failed by another node while this one was paused) gets
// ErrFenced and must stop.
type Fence struct {
	TurnID int64
	Owner  string
}

// ErrFenced is the answer to a write of a turn that is no longer running for its writer.
var ErrFenced = sandchat.Errorf(sandchat.ECONFLICT, "This turn is no longer running here: it was ended elsewhere (failed as stale, or cancelled).")
