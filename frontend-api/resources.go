package frontendapi

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/agents"
	"github.com/sandchat/sandchat/conversations"
)

func (s *Server) listInternalTools(c *fiber.Ctx) error {
	return c.JSON(s.catalogue.List())
}

func (s *Server) createAgent(c *fiber.Ctx) error {
	var in agents.AgentInput
	if err := decode(c, &in); err != nil {
		return err
	}
	a, err := s.agents.CreateAgent(c.UserContext(), in)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(a)
}

func (s *Server) listAgents(c *fiber.Ctx) error {
	list, err := s.agents.FindAgents(c.UserContext())
	if err != nil {
		return err
	}
	return c.JSON(list)
}

func (s *Server) getAgent(c *fiber.Ctx) error {
	id, err := paramID(c, "id")
	if err != nil {
		return err
	}
	a, err := s.agents.FindAgentByID(c.UserContext(), id)
	if err != nil {
		return err
	}
	return c.JSON(a)
}

func (s *Server) updateAgent(c *fiber.Ctx) error {
	id, err := paramID(c, "id")
	if err != nil {
		return err
	}
	var in agents.AgentInput
	if err := decode(c, &in); err != nil {
		return err
	}
	ctx := c.UserContext()
	var before *agents.Agent
	if in.InternalTools != nil {
		// Read first, so only a change of the tools is announced.
		if before, err = s.agents.FindAgentByID(ctx, id); err != nil {
			return err
		}
	}
	a, err := s.agents.UpdateAgent(ctx, id, in)
	if err != nil {
		return err
	}
	if before != nil && !sameTools(before.InternalTools, a.InternalTools) {
		s.agentToolsChanged(ctx, a)
	}
	return c.JSON(a)
}

// agentToolsChanged tells every socket of the acting user that an agent's internal
// tools changed, so a tab with one of its conversations open redraws what it shows of
// them. The change is committed: a failed publish leaves those tabs stale until they
// reload the conversation.
func (s *Server) agentToolsChanged(ctx context.Context, a *agents.Agent) {
	data, _ := json.Marshal(map[string]any{"agent_id": a.ID, "internal_tools": a.InternalTools})
	ev := conversations.Event{Type: conversations.EventInternalToolsUpdated, Data: data}
	if err := s.events.PublishUser(ctx, sandchat.UserIDFromContext(ctx), ev); err != nil {
		s.log.WarnContext(ctx, "publish internal_tools.updated", "agent_id", a.ID, "err", err)
	}
}

// sameTools: a tool absent from a setting is off.
func sameTools(a, b map[string]bool) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

func (s *Server) deleteAgent(c *fiber.Ctx) error {
	id, err := paramID(c, "id")
	if err != nil {
		return err
	}
	if err := s.agents.DeleteAgent(c.UserContext(), id); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

func (s *Server) createConversation(c *fiber.Ctx) error {
	var in struct {
		AgentID *int64 `json:"agent_id"`
		Title   string `json:"title"`
	}
	// An empty body is a conversation with no agent and no title.
	if len(bytes.TrimSpace(c.Body())) > 0 {
		if err := decode(c, &in); err != nil {
			return err
		}
	}
	conv, err := s.conversations.CreateConversation(c.UserContext(), in.AgentID, in.Title)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(conv)
}

// searchLimit is how many conversations a search answers with.
const searchLimit = 50

// listConversations lists the caller's conversations, or with ?q= searches them: titles
// and messages, full-text, each hit with its best message (the web client opens it
// there).
func (s *Server) listConversations(c *fiber.Ctx) error {
	if q := c.Query("q"); q != "" {
		hits, err := s.conversations.SearchConversations(c.UserContext(), q, searchLimit)
		if err != nil {
			return err
		}
		return c.JSON(hits)
	}
	list, err := s.conversations.FindConversations(c.UserContext())
	if err != nil {
		return err
	}
	return c.JSON(list)
}

func (s *Server) getConversation(c *fiber.Ctx) error {
	id, err := paramID(c, "id")
	if err != nil {
		return err
	}
	conv, err := s.conversations.FindConversationByID(c.UserContext(), id)
	if err != nil {
		return err
	}
	return c.JSON(conv)
}

func (s *Server) renameConversation(c *fiber.Ctx) error {
	id, err := paramID(c, "id")
	if err != nil {
		return err
	}
	var in struct {
		Title string `json:"title"`
	}
	if err := decode(c, &in); err != nil {
		return err
	}
	conv, err := s.conversations.RenameConversation(c.UserContext(), id, in.Title)
	if err != nil {
		return err
	}
	return c.JSON(conv)
}

func (s *Server) deleteConversation(c *fiber.Ctx) error {
	id, err := paramID(c, "id")
	if err != nil {
		return err
	}
	// Its Python state goes first: if that fails, the conversation is still there and the
	// delete can be asked again; a run started in between cannot save its session back.
	if err := s.sandbox.ForgetConversation(c.UserContext(), id); err != nil {
		return err
	}
	if err := s.conversations.DeleteConversation(c.UserContext(), id); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

func (s *Server) getConversationTools(c *fiber.Ctx) error {
	id, err := paramID(c, "id")
	if err != nil {
		return err
	}
	states, err := s.tools.ConversationTools(c.UserContext(), id)
	if err != nil {
		return err
	}
	return c.JSON(states)
}

func (s *Server) putConversationTool(c *fiber.Ctx) error {
	id, err := paramID(c, "id")
	if err != nil {
		return err
	}
	// "enabled" must be present: true or false sets the override, null clears it.
	var in struct {
		Enabled json.RawMessage `json:"enabled"`
	}
	if err := decode(c, &in); err != nil {
		return err
	}
	var enabled *bool
	switch string(bytes.TrimSpace(in.Enabled)) {
	case "true":
		enabled = new(bool)
		*enabled = true
	case "false":
		enabled = new(bool)
	case "null":
	default:
		return sandchat.Errorf(sandchat.EINVALID, `Body must be {"enabled": true|false|null} (null inherits from the agent).`)
	}
	// The id reaches events and logs: copy it out of fasthttp's reused buffer.
	st, err := s.tools.SetConversationTool(c.UserContext(), id, utils.CopyString(c.Params("tool")), enabled)
	if err != nil {
		return err
	}
	return c.JSON(st)
}

// memberService is what agents and conversations share for their members.
type memberService interface {
	Members(ctx context.Context, id int64) ([]sandchat.Member, error)
	SetMember(ctx context.Context, id, userID int64, role string) (sandchat.Member, error)
	RemoveMember(ctx context.Context, id, userID int64) error
}

// memberRoutes serves a resource's members; removed, when set, runs after a member was
// removed.
func (s *Server) memberRoutes(r fiber.Router, path string, svc memberService, removed func(ctx context.Context, id, userID int64)) {
	r.Get(path, func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		list, err := svc.Members(c.UserContext(), id)
		if err != nil {
			return err
		}
		return c.JSON(list)
	})
	r.Post(path, func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		var in struct {
			UserID int64  `json:"user_id"`
			Role   string `json:"role"`
		}
		if err := decode(c, &in); err != nil {
			return err
		}
		m, err := svc.SetMember(c.UserContext(), id, in.UserID, in.Role)
		if err != nil {
			return err
		}
		return c.JSON(m)
	})
	r.Delete(path+"/:user_id", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		userID, err := paramID(c, "user_id")
		if err != nil {
			return err
		}
		if err := svc.RemoveMember(c.UserContext(), id, userID); err != nil {
			return err
		}
		if removed != nil {
			removed(c.UserContext(), id, userID)
		}
		return c.SendStatus(fiber.StatusNoContent)
	})
}
