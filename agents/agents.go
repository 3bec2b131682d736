// Package agents owns agents (a model, a system prompt, internal-tool settings and, for
// swarm mode, child agents), who may use them, and the assistant turn loop.
package agents

import (
	"context"
	"strings"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/toolkits"
)

// Agent is an assistant configuration. Role is the caller's role on it.
type Agent struct {
	ID            int64           `json:"id"`
	OwnerID       int64           `json:"owner_id"`
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	SystemPrompt  string          `json:"system_prompt"`
	Model         string          `json:"model"`
	InternalTools map[string]bool `json:"internal_tools"`
	// Preload names modules imported into the agent's Python session before its code
	// runs, so its first run does not wait for them.
	Preload   []string  `json:"preload"`
	Children  []int64   `json:"children"`
	Version   int64     `json:"version"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// AgentInput creates an agent, or updates the fields that are set. An update must carry
// the version it was read at: a stale one is a conflict.
type AgentInput struct {
	Name          *string          `json:"name"`
	Description   *string          `json:"description"`
	SystemPrompt  *string          `json:"system_prompt"`
	Model         *string          `json:"model"`
	InternalTools *map[string]bool `json:"internal_tools"`
	Preload       *[]string        `json:"preload"`
	Children      *[]int64         `json:"children"`
	Version       *int64           `json:"version"`
}

// Limits on agent fields.
const (
	MaxNameLen         = 200
	MaxDescriptionLen  = 4000
	MaxSystemPromptLen = 64 * 1024
	MaxModelLen        = 200
	MaxChildren        = 32
	MaxPreload         = 32
)

// Validate checks the fields that are set; knownTool tells whether a tool id exists.
func (in AgentInput) Validate(creating bool, knownTool func(string) bool) error {
	if creating && in.Name == nil {
		return sandchat.Errorf(sandchat.EINVALID, "name is required.")
	}
	if !creating && in.Version == nil {
		return sandchat.Errorf(sandchat.EINVALID, "version is required to update an agent.")
	}
	if in.Name != nil && (strings.TrimSpace(*in.Name) == "" || len(*in.Name) > MaxNameLen) {
		return sandchat.Errorf(sandchat.EINVALID, "name must be 1 to %d characters.", MaxNameLen)
	}
	if in.Description != nil && len(*in.Description) > MaxDescriptionLen {
		return sandchat.Errorf(sandchat.EINVALID, "description must be at most %d characters.", MaxDescriptionLen)
	}
	if in.SystemPrompt != nil && len(*in.SystemPrompt) > MaxSystemPromptLen {
		return sandchat.Errorf(sandchat.EINVALID, "system_prompt must be at most %d bytes.", MaxSystemPromptLen)
	}
	if in.Model != nil && len(*in.Model) > MaxModelLen {
		return sandchat.Errorf(sandchat.EINVALID, "model must be at most %d characters.", MaxModelLen)
	}
	if in.InternalTools != nil {
		for id := range *in.InternalTools {
			if !knownTool(id) {
				return sandchat.Errorf(sandchat.EINVALID, "internal_tools: unknown tool %q.", id)
			}
		}
	}
	if in.Preload != nil {
		if len(*in.Preload) > MaxPreload {
			return sandchat.Errorf(sandchat.EINVALID, "preload: at most %d modules.", MaxPreload)
		}
		if err := toolkits.CheckPreload(*in.Preload); err != nil {
			return sandchat.Errorf(sandchat.EINVALID, "preload: %s", sandchat.ErrorMessage(err))
		}
	}
	if in.Children != nil && len(*in.Children) > MaxChildren {
		return sandchat.Errorf(sandchat.EINVALID, "children: at most %d.", MaxChildren)
	}
	return nil
}

// Service manages agents on behalf of the user in the context. An agent the user may
// not view is reported as not found; one they may view but not change, as forbidden.
type Service interface {
	CreateAgent(ctx context.Context, in AgentInput) (*Agent, error)
	FindAgentByID(ctx context.Context, id int64) (*Agent, error)
	FindAgents(ctx context.Context) ([]*Agent, error)
	UpdateAgent(ctx context.Context, id int64, in AgentInput) (*Agent, error)
	DeleteAgent(ctx context.Context, id int64) error
	Members(ctx context.Context, id int64) ([]sandchat.Member, error)
	SetMember(ctx context.Context, id, userID int64, role string) (sandchat.Member, error)
	RemoveMember(ctx context.Context, id, userID int64) error
}
