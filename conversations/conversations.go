// Package conversations owns conversations, who may use them, their per-conversation
// internal-tool overrides and their event log.
package conversations

import (
	"context"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandchat/sandchat"
)

// Conversation is a chat between users and an agent. Role is the caller's role on it.
type Conversation struct {
	ID        int64     `json:"id"`
	OwnerID   int64     `json:"owner_id"`
	AgentID   *int64    `json:"agent_id"`
	Title     string    `json:"title"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// MaxTitleLen bounds a conversation title.
const MaxTitleLen = 500

// TitleFrom is the title a conversation gets from its first message when none was set:
// the first line of prose, code fences and markdown marks left out, cut at a word.
func TitleFrom(content string) string {
	const max = 60
	var line string
	inFence := false
	for _, l := range strings.Split(content, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "```") {
			inFence = !inFence
			continue
		}
		if t = strings.TrimLeft(t, "#>*-` "); t != "" && !inFence {
			line = t
			break
		}
	}
	if line == "" {
		// Only code: name it after the code's first line.
		for _, l := range strings.Split(content, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "```") {
				line = t
				break
			}
		}
	}
	if utf8.RuneCountInString(line) <= max {
		return line
	}
	r := []rune(line)[:max]
	if i := strings.LastIndexByte(string(r), ' '); i > max/2 {
		return string(r)[:i] + "…"
	}
	return string(r) + "…"
}

// SearchHit is a conversation a search found, with the message that matched best (none
// when only its title did).
type SearchHit struct {
	*Conversation
	Match *SearchMatch `json:"match,omitempty"`
}

// SearchMatch is where in a conversation a search matched: the message, and the words
// around the match.
type SearchMatch struct {
	MessageID int64  `json:"message_id"`
	Role      string `json:"role"`
	Snippet   string `json:"snippet"`
}

// MaxSearchLen bounds a search's text.
const MaxSearchLen = 200

// Event is what WebSocket clients receive. Conversation events carry the conversation's
// seq, which increases by one per event and lets a client detect and fill gaps; user
// events (toasts) carry neither.
type Event struct {
	Type           string          `json:"type"`
	ConversationID int64           `json:"conversation_id,omitempty"`
	Seq            int64           `json:"seq,omitempty"`
	AgentPath      []string        `json:"agent_path,omitempty"`
	Data           json.RawMessage `json:"data"`
}

// Event types.
const (
	EventToast                = "toast"
	EventInternalToolsUpdated = "internal_tools.updated"
)

// ToolSettings are the stored inputs of toggle resolution for a conversation.
type ToolSettings struct {
	Conversation *Conversation
	// Overrides are the conversation's own settings; a missing tool inherits.
	Overrides map[string]bool
	// Agent is the primary agent's saved settings (empty without an agent).
	Agent map[string]bool
}

// Service manages conversations on behalf of the user in the context. A conversation the
// user may not view is reported as not found; one they may view but not change, as
// forbidden.
type Service interface {
	CreateConversation(ctx context.Context, agentID *int64, title string) (*Conversation, error)
	FindConversationByID(ctx context.Context, id int64) (*Conversation, error)
	FindConversations(ctx context.Context) ([]*Conversation, error)
	// SearchConversations finds, among the conversations the user may view, those whose
	// title or messages hold every word of query (each also as the start of a longer
	// word), best first, at most limit.
	SearchConversations(ctx context.Context, query string, limit int) ([]SearchHit, error)
	// RenameConversation sets the title; edit access.
	RenameConversation(ctx context.Context, id int64, title string) (*Conversation, error)
	DeleteConversation(ctx context.Context, id int64) error
	Members(ctx context.Context, id int64) ([]sandchat.Member, error)
	SetMember(ctx context.Context, id, userID int64, role string) (sandchat.Member, error)
	RemoveMember(ctx context.Context, id, userID int64) error

	// ToolSettings needs view access.
	ToolSettings(ctx context.Context, id int64) (ToolSettings, error)
	// SetToolOverride needs edit access. enabled nil removes the override. In the same
	// transaction it appends an event of type evType whose data render builds from the
	// new settings, and returns both.
	SetToolOverride(ctx context.Context, id int64, toolID string, enabled *bool,
		evType string, render func(ToolSettings) (json.RawMessage, error)) (ToolSettings, Event, error)
	// EventsSince returns the conversation's events after seq, oldest first, at most
	// limit. recovered is false when events after seq were already pruned.
	EventsSince(ctx context.Context, id, since int64, limit int) (events []Event, recovered bool, err error)
	// LastSeq is the seq of the conversation's newest event (0 for none); view access.
	LastSeq(ctx context.Context, id int64) (int64, error)
}

// Publisher fans events out to the WebSocket clients of every node.
type Publisher interface {
	PublishConversation(ctx context.Context, ev Event) error
	PublishUser(ctx context.Context, userID int64, ev Event) error
}
