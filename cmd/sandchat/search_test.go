package main

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

type searchHit struct {
	ID    int64  `json:"id"`
	Title string `json:"title"`
	Role  string `json:"role"`
	Match *struct {
		MessageID int64  `json:"message_id"`
		Role      string `json:"role"`
		Snippet   string `json:"snippet"`
	} `json:"match"`
}

func (c *client) search(q string) []searchHit {
	c.t.Helper()
	var hits []searchHit
	c.must(200, "GET", "/api/v1/conversations?q="+url.QueryEscape(q), nil, &hits)
	return hits
}

// TestSearchConversations: GET /api/v1/conversations?q= searches titles and the text of
// messages with Postgres full-text, every word as typed (code included) and the last
// one as it is being typed; a user finds only what they may view, and each hit names
// the message it matched.
func TestSearchConversations(t *testing.T) {
	t.Parallel()
	m := newEnv(t).node()
	alice, _ := m.user(t, "alice", false)
	bob, bobID := m.user(t, "bob", false)
	carol, _ := m.user(t, "carol", false)

	titled := alice.createConversation(0)
	alice.must(200, "PATCH", fmt.Sprintf("/api/v1/conversations/%d", titled), map[string]any{"title": "import sys"}, nil)
	talked := alice.createConversation(0)
	if status, _ := alice.say(talked, "Please remember that z = 5 in the Zanzibar report."); status != "completed" {
		t.Fatalf("turn %s", status)
	}
	var msgs []messageJSON
	alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/messages", talked), nil, &msgs)
	asked := msgs[0].ID
	shared := alice.createConversation(0)
	alice.say(shared, "The quarterly Zanzibar figures, for bob to read.")
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", shared), map[string]any{"user_id": bobID, "role": "viewer"}, nil)
	bobs := bob.createConversation(0)
	bob.say(bobs, "bob's own zanzibar notes")

	ids := func(hits []searchHit) []int64 {
		var out []int64
		for _, h := range hits {
			out = append(out, h.ID)
		}
		return out
	}
	cases := []struct {
		name, q string
		who     *client
		want    []int64
	}{
		{"a title, as code", "import sys", alice, []int64{titled}},
		{"a word being typed", "impo", alice, []int64{titled}},
		{"code in a message", "z = 5", alice, []int64{talked}},
		{"any case", "ZANZIBAR", alice, []int64{shared, talked}},
		{"every word must be there", "zanzibar quarterly", alice, []int64{shared}},
		{"a viewer finds what is shared with them, and their own", "zanzibar", bob, []int64{bobs, shared}},
		{"a stranger finds nothing of theirs", "zanzibar", carol, nil},
		{"nothing to look for", "= ( )", alice, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ids(tc.who.search(tc.q))
			a, b := slices.Clone(got), slices.Clone(tc.want)
			slices.Sort(a)
			slices.Sort(b)
			if !slices.Equal(a, b) {
				t.Errorf("%q finds %v, want %v", tc.q, got, tc.want)
			}
		})
	}

	t.Run("a hit names its message and the words around the match", func(t *testing.T) {
		hits := alice.search("z = 5")
		if len(hits) != 1 || hits[0].Match == nil || hits[0].Match.MessageID != asked || hits[0].Match.Role != "user" ||
			!strings.Contains(hits[0].Match.Snippet, "z = 5") || hits[0].Role != "owner" {
			t.Fatalf("hits %+v", hits)
		}
		if hits := alice.search("import"); len(hits) != 1 || hits[0].Match != nil || hits[0].Title != "import sys" {
			t.Errorf("a title's hit: %+v", hits)
		}
		if hits := bob.search("quarterly"); len(hits) != 1 || hits[0].Role != "viewer" {
			t.Errorf("the viewer's hit: %+v", hits)
		}
	})

	t.Run("a search too long is refused", func(t *testing.T) {
		alice.must(400, "GET", "/api/v1/conversations?q="+strings.Repeat("x", 201), nil, nil)
	})

	t.Run("without q the list is as before", func(t *testing.T) {
		var list []searchHit
		alice.must(200, "GET", "/api/v1/conversations", nil, &list)
		if len(list) != 3 {
			t.Errorf("alice lists %d conversations, want 3", len(list))
		}
	})
}
