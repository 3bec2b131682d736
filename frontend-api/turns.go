package frontendapi

import (
	"bytes"
	"context"

	"github.com/gofiber/fiber/v2"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/agents"
	"github.com/sandchat/sandchat/conversations"
)

// TurnService starts and cancels assistant turns.
type TurnService interface {
	Start(ctx context.Context, convID int64, content string) (agents.Started, error)
	Retry(ctx context.Context, convID, messageID int64, content *string) (agents.Retried, error)
	SetAnswer(ctx context.Context, convID, messageID, turnID int64) (conversations.Message, error)
	Cancel(ctx context.Context, convID, turnID int64) error
}

// MessageStore lists a conversation's messages and reads its turns.
type MessageStore interface {
	Messages(ctx context.Context, convID int64) ([]conversations.Message, error)
	Turn(ctx context.Context, convID, turnID int64) (conversations.Turn, error)
	// Turns are the conversation's turns that ended other than completed, oldest first:
	// a client says under each answer how its turn ended.
	Turns(ctx context.Context, convID int64) ([]conversations.Turn, error)
}

func (s *Server) turnRoutes(v1 fiber.Router) {
	v1.Post("/conversations/:id/messages", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		var in struct {
			Content string `json:"content"`
		}
		if err := decode(c, &in); err != nil {
			return err
		}
		started, err := s.turns.Start(c.UserContext(), id, in.Content)
		if err != nil {
			return err
		}
		return c.Status(fiber.StatusAccepted).JSON(started)
	})
	v1.Post("/conversations/:id/messages/:message_id/retry", func(c *fiber.Ctx) error {
		id, msgID, err := messageParams(c)
		if err != nil {
			return err
		}
		// No body answers the message again as it is; {"content": …} edits it first.
		var in struct {
			Content *string `json:"content"`
		}
		if len(bytes.TrimSpace(c.Body())) > 0 {
			if err := decode(c, &in); err != nil {
				return err
			}
		}
		retried, err := s.turns.Retry(c.UserContext(), id, msgID, in.Content)
		if err != nil {
			return err
		}
		return c.Status(fiber.StatusAccepted).JSON(retried)
	})
	// Which of a user message's answer versions is current: {"turn_id": one of its versions}.
	v1.Put("/conversations/:id/messages/:message_id/answer", func(c *fiber.Ctx) error {
		id, msgID, err := messageParams(c)
		if err != nil {
			return err
		}
		var in struct {
			TurnID int64 `json:"turn_id"`
		}
		if err := decode(c, &in); err != nil {
			return err
		}
		if in.TurnID <= 0 {
			return sandchat.Errorf(sandchat.EINVALID, "turn_id names the answer version to show: one of the message's versions.")
		}
		msg, err := s.turns.SetAnswer(c.UserContext(), id, msgID, in.TurnID)
		if err != nil {
			return err
		}
		return c.JSON(msg)
	})
	v1.Get("/conversations/:id/messages", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		msgs, err := s.messages.Messages(c.UserContext(), id)
		if err != nil {
			return err
		}
		return c.JSON(msgs)
	})
	v1.Get("/conversations/:id/turns", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		turns, err := s.messages.Turns(c.UserContext(), id)
		if err != nil {
			return err
		}
		return c.JSON(turns)
	})
	v1.Get("/conversations/:id/turns/:turn_id", func(c *fiber.Ctx) error {
		id, turnID, err := turnIDs(c)
		if err != nil {
			return err
		}
		t, err := s.messages.Turn(c.UserContext(), id, turnID)
		if err != nil {
			return err
		}
		return c.JSON(t)
	})
	v1.Post("/conversations/:id/turns/:turn_id/cancel", func(c *fiber.Ctx) error {
		id, turnID, err := turnIDs(c)
		if err != nil {
			return err
		}
		if err := s.turns.Cancel(c.UserContext(), id, turnID); err != nil {
			return err
		}
		return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"turn_id": turnID, "cancelling": true})
	})
}

func turnIDs(c *fiber.Ctx) (convID, turnID int64, err error) {
	if convID, err = paramID(c, "id"); err != nil {
		return 0, 0, err
	}
	turnID, err = paramID(c, "turn_id")
	return convID, turnID, err
}

// messageParams are the conversation's and the message's ids of a …/messages/:message_id route.
func messageParams(c *fiber.Ctx) (convID, msgID int64, err error) {
	if convID, err = paramID(c, "id"); err != nil {
		return 0, 0, err
	}
	msgID, err = paramID(c, "message_id")
	return convID, msgID, err
}
