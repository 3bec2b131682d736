package main

import (
	"fmt"
	"testing"
	"time"
)

// TestEndedTurns: GET /api/v1/conversations/{id}/turns lists the turns that ended other
// than completed (the web client says under each answer how its turn ended, after a
// reload too), to whoever may view the conversation; 404 to a stranger.
func TestEndedTurns(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	llm, asked := heldModel(t, release)
	m := newEnv(t).node(func(c *Config, _ *Main) {
		c.LLM = LLMConfig{Provider: "openai", BaseURL: llm, APIKey: "sk-ended", Model: "m"}
	})
	alice, _ := m.user(t, "alice", false)
	bob, bobID := m.user(t, "bob", false)
	carol, _ := m.user(t, "carol", false)
	conv := alice.createConversation(0)
	path := fmt.Sprintf("/api/v1/conversations/%d/turns", conv)

	stopped := alice.post(conv, "A story, please.")
	<-asked
	alice.must(202, "POST", fmt.Sprintf("%s/%d/cancel", path, stopped), nil, nil)
	if tj := alice.awaitTurn(conv, stopped, 30*time.Second); tj.Status != "cancelled" {
		t.Fatalf("turn %+v", tj)
	}
	close(release)
	if status, _ := alice.say(conv, "Another one."); status != "completed" {
		t.Fatalf("second turn %s", status)
	}
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": bobID, "role": "viewer"}, nil)
	for _, who := range []*client{alice, bob} {
		var turns []turnJSON
		who.must(200, "GET", path, nil, &turns)
		if len(turns) != 1 || turns[0].ID != stopped || turns[0].Status != "cancelled" {
			t.Errorf("listed %+v, want only the cancelled turn %d", turns, stopped)
		}
	}
	carol.must(404, "GET", path, nil, nil)
}
