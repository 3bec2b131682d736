package agents

import (
	"encoding/json"

	"github.com/sandchat/sandchat/conversations"
)

// modelContext turns stored messages into the model's context: the primary agent's
// exchange only (a child's inner steps reach the parent as its tool result), with tool
// calls and results kept in pairs, as chat APIs require.
func modelContext(history []conversations.Message) []ChatMessage {
	answered := map[string]bool{}
	for _, m := range history {
		if m.Role == RoleTool && len(m.AgentPath) <= 1 {
			answered[m.ToolCallID] = true
		}
	}
	var out []ChatMessage
	asked := map[string]bool{}
	for _, m := range history {
		if len(m.AgentPath) > 1 {
			continue
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
