package toolkits

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
)

// ToastUpdated is the toast every tab of the acting user shows after a toggle.
const ToastUpdated = "Internal tools configuration updated"

// ConversationStore is what the toggles need of the conversation store.
type ConversationStore interface {
	ToolSettings(ctx context.Context, id int64) (conversations.ToolSettings, error)
	SetToolOverride(ctx context.Context, id int64, toolID string, enabled *bool,
		evType string, render func(conversations.ToolSettings) (json.RawMessage, error)) (conversations.ToolSettings, conversations.Event, error)
}

// Service resolves and changes the internal tools of conversations.
type Service struct {
	Catalogue     *Catalogue
	Conversations ConversationStore
	Events        conversations.Publisher
	Log           *slog.Logger
}

// ConversationTools returns every catalogue tool's effective state in a conversation for
// its primary agent.
func (s *Service) ConversationTools(ctx context.Context, convID int64) ([]State, error) {
	ts, err := s.Conversations.ToolSettings(ctx, convID)
	if err != nil {
		return nil, err
	}
	return s.Catalogue.Resolve(ts.Overrides, ts.Agent), nil
}

// ToolsUpdated is the data of an internal_tools.updated event.
type ToolsUpdated struct {
	ToolID string  `json:"tool_id"`
	Tools  []State `json:"tools"`
}

// SetConversationTool sets (or, with nil, clears) the conversation's override of a tool
// and tells clients: the conversation's subscribers get internal_tools.updated with the
// new states, every socket of the acting user gets the toast.
func (s *Service) SetConversationTool(ctx context.Context, convID int64, toolID string, enabled *bool) (State, error) {
	if !s.Catalogue.Has(toolID) {
		return State{}, sandchat.Errorf(sandchat.ENOTFOUND, "Internal tool %q not found.", toolID)
	}
	var states []State
	var title string
	_, ev, err := s.Conversations.SetToolOverride(ctx, convID, toolID, enabled, conversations.EventInternalToolsUpdated,
		func(ts conversations.ToolSettings) (json.RawMessage, error) {
			states = s.Catalogue.Resolve(ts.Overrides, ts.Agent)
			if ts.Conversation != nil {
				title = ts.Conversation.Title
			}
			return json.Marshal(ToolsUpdated{ToolID: toolID, Tools: states})
		})
	if err != nil {
		return State{}, err
	}
	// The change is committed: a failed publish only delays clients, who find the gap
	// by seq and replay it from the event log.
	if err := s.Events.PublishConversation(ctx, ev); err != nil {
		s.Log.WarnContext(ctx, "publish internal_tools.updated", "conversation_id", convID, "err", err)
	}
	i := slices.IndexFunc(states, func(st State) bool { return st.ID == toolID })
	if i < 0 {
		return State{}, sandchat.Errorf(sandchat.EINTERNAL, "tool %q missing from its own resolution", toolID)
	}
	st := states[i]
	// The toast names its conversation, so a tab that has another one open can say
	// which, and the tool with its state and where that comes from.
	toast, _ := json.Marshal(map[string]any{"level": "success", "message": ToastUpdated,
		"conversation_id": convID, "conversation_title": title,
		"tool": toolID, "tool_name": st.Name, "enabled": st.Enabled, "source": st.Source})
	if err := s.Events.PublishUser(ctx, sandchat.UserIDFromContext(ctx), conversations.Event{Type: conversations.EventToast, Data: toast}); err != nil {
		s.Log.WarnContext(ctx, "publish toast", "conversation_id", convID, "err", err)
	}
	return st, nil
}
