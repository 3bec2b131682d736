package agents

import (
	"encoding/json"

	"github.com/sandchat/sandchat/conversations"
)

// modelContext turns stored messages into the model's context: the primary agent's
// exchange only (a child's inner steps reach the parent as its tool result), each user
// message with its current answer version only, with tool calls and results kept in
// pairs, as chat APIs require.
func modelContext(history []conversations.Message) []ChatMessage {
	superseded := map[int64]bool{} // turns whose answer is not their message's current one
	for _, m := range history {
		if m.Role == RoleUser && m.AnswerTurnID != nil {
			for _, v := range m.Versions {
				superseded[v] = v != *m.AnswerTurnID
			}
		}
	}
	answered := map[string]bool{}
	for _, m := range history {
		if m.Role == RoleTool && len(m.AgentPath) <= 1 {
			answered[m.ToolCallID] = true
		}
	}
	var out []ChatMessage
	asked := map[string]bool{}
	var turn int64
	for _, m := range history {
		if len(m.AgentPath) > 1 || m.Role != RoleUser && m.TurnID != nil && superseded[*m.TurnID] {
			continue
		}
		if m.TurnID != nil && *m.TurnID != turn {
			turn = *m.TurnID
			// A turn that opens without a user message answered the one before again
			// (Runner.Retry): its answer replaces the earlier ones (of messages stored
			// before answers had versions).
			if m.Role != RoleUser {
				out = untilLastUser(out)
			}
		}
		switch m.Role {
		case RoleUser:
			out = append(out, ChatMessage{Role: RoleUser, Content: m.Content})
		case RoleAssistant:
			cm := ChatMessage{Role: RoleAssistant, Content: m.Content}
			var calls []ToolCall
			_ = json.Unmarshal(m.ToolCalls, &calls)
			for _, c := range calls {
				// A call cut off by a crash or cancel has no result: drop it.
				if answered[c.ID] {
					cm.ToolCalls = append(cm.ToolCalls, c)
					asked[c.ID] = true
				}
			}
			if cm.Content == "" && len(cm.ToolCalls) == 0 {
				continue
			}
			out = append(out, cm)
		case RoleTool:
			if asked[m.ToolCallID] {
				out = append(out, ChatMessage{Role: RoleTool, Content: m.Content, ToolCallID: m.ToolCallID})
			}
		}
	}
	return out
}

// untilLastUser is msgs up to its last user message: what a turn answering that message
// again sees.
func untilLastUser(msgs []ChatMessage) []ChatMessage {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleUser {
			return msgs[:i+1]
		}
	}
	return msgs
}
