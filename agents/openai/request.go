package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	oai "github.com/openai/openai-go/v3"

	"github.com/sandchat/sandchat/agents"
)

// buildParams translates one step into the API's request. Its errors are the caller's
// bugs (an unknown role, a malformed schema), hence plain internal errors.
func buildParams(req agents.CompletionRequest, defaultModel string) (oai.ChatCompletionNewParams, error) {
	// The stream's last chunk then says what the step cost (the turn's usage, the
	// metrics' tokens); an endpoint that ignores the option sends none.
	params := oai.ChatCompletionNewParams{Model: req.Model,
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}}
	if params.Model == "" {
		params.Model = defaultModel
	}
	for i, m := range req.Messages {
		msg, err := buildMessage(m)
		if err != nil {
			return params, fmt.Errorf("openai: message %d: %w", i, err)
		}
		params.Messages = append(params.Messages, msg)
	}
	for _, t := range req.Tools {
		fn := oai.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fn.Description = oai.String(t.Description)
		}
		if schema := bytes.TrimSpace(t.Parameters); len(schema) > 0 && !bytes.Equal(schema, []byte("null")) {
			if err := json.Unmarshal(schema, &fn.Parameters); err != nil {
				return params, fmt.Errorf("openai: tool %q: parameters are not a JSON Schema object: %w", t.Name, err)
			}
		} else {
			// Spelled out because some compatible servers reject a function without parameters.
			fn.Parameters = oai.FunctionParameters{"type": "object", "properties": map[string]any{}}
		}
		params.Tools = append(params.Tools, oai.ChatCompletionFunctionTool(fn))
	}
	return params, nil
}

func buildMessage(m agents.ChatMessage) (oai.ChatCompletionMessageParamUnion, error) {
	switch m.Role {
	case agents.RoleSystem:
		return oai.SystemMessage(m.Content), nil
	case agents.RoleUser:
		return oai.UserMessage(m.Content), nil
	case agents.RoleTool:
		if m.ToolCallID == "" {
			return oai.ChatCompletionMessageParamUnion{}, fmt.Errorf("tool message without a tool call id")
		}
		return oai.ToolMessage(m.Content, m.ToolCallID), nil
	case agents.RoleAssistant:
		var a oai.ChatCompletionAssistantMessageParam
		// The API refuses an assistant message with neither content nor tool calls,
		// but accepts one with tool calls and no content.
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = oai.String(m.Content)
		}
		if name := participantName(m.Name); name != "" {
			a.Name = oai.String(name)
		}
		for _, c := range m.ToolCalls {
			a.ToolCalls = append(a.ToolCalls, oai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{
					ID: c.ID,
					Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      c.Name,
						Arguments: argumentsString(c.Arguments),
					},
				},
			})
		}
		return oai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	default:
		return oai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", m.Role)
	}
}

// participantName fits an agent's name to the pattern the API enforces on a message's
// name, since agent names are free text.
func participantName(name string) string {
	name = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		default:
			return '_'
		}
	}, name)
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}

// argumentsString is the inverse of toolArguments: arguments the model sent as
// malformed JSON were kept as a JSON string and go back to the model verbatim.
func argumentsString(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "{}"
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}

// toolArguments makes the model's argument text a valid json.RawMessage, which the
// caller stores and marshals. Malformed text (a truncated answer, a sloppy model) is
// kept as a JSON string, so the tool's decoding fails and the model is told, instead
// of the turn failing on a marshal error.
func toolArguments(s string) json.RawMessage {
	if strings.TrimSpace(s) == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	quoted, _ := json.Marshal(s)
	return quoted
}
