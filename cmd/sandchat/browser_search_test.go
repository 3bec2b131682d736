package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// pressSlash presses "/" as a keyboard does: one key press that types the character
// unless the page's keydown handler refuses it (chromedp.KeyEvent types it regardless).
func pressSlash() chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		if err := input.DispatchKeyEvent(input.KeyDown).WithKey("/").WithCode("Slash").WithText("/").WithUnmodifiedText("/").
			WithWindowsVirtualKeyCode(191).WithNativeVirtualKeyCode(191).Do(ctx); err != nil {
			return err
		}
		return input.DispatchKeyEvent(input.KeyUp).WithKey("/").WithCode("Slash").WithWindowsVirtualKeyCode(191).WithNativeVirtualKeyCode(191).Do(ctx)
	})
}

// TestBrowserSearch: the conversation search, by keyboard. "/" goes to the box (at phone
// width it opens the list's drawer), the server searches titles and messages as the
// user types, the hits show the words they matched, ↓ and Enter open one at the message
// it matched (in view, with the focus), Escape gives the list back; another user's
// conversations are never found.
func TestBrowserSearch(t *testing.T) {
	m := newEnv(t).node()
	alice, _ := m.user(t, "alice", false)
	bob, _ := m.user(t, "bob", false)
	titled := alice.createConversation(0)
	alice.must(200, "PATCH", fmt.Sprintf("/api/v1/conversations/%d", titled), map[string]any{"title": "import sys"}, nil)
	long := alice.createConversation(0)
	alice.must(200, "PATCH", fmt.Sprintf("/api/v1/conversations/%d", long), map[string]any{"title": "a long one"}, nil)
	for i := range 12 {
		alice.say(long, fmt.Sprintf("filler message number %d, to push the match out of view", i))
	}
	alice.say(long, "remember that z = 5 for the Zanzibar figures")
	for i := range 12 {
		alice.say(long, fmt.Sprintf("later filler %d", i))
	}
	secret := bob.createConversation(0)
	bob.say(secret, "bob's Zanzibar secret")
	var msgs []messageJSON
	alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/messages", long), nil, &msgs)
	var match int64
	for _, msg := range msgs {
		if strings.Contains(msg.Content, "z = 5") && msg.Role == "user" {
			match = msg.ID
		}
	}
	base := "http://" + m.Addr()
	dir := screenshotDir(t)
	tb := signedInTab(t, browser(t), "alice", dir, base, "/", alice.token, sizes[0])

	hits := `[...document.querySelectorAll("#convs a")].map((a) => a.querySelector(".nav-title").textContent + "|" + (a.querySelector(".snippet")?.textContent ?? ""))`
	for _, size := range sizes {
		t.Run(fmt.Sprintf("at %d px", size[0]), func(t *testing.T) {
			tb.run(t, "start from the list",
				chromedp.EmulateViewport(size[0], size[1]),
				chromedp.Evaluate(`location.hash = "#/"; true`, nil),
				until(`document.querySelector("#conv-title").textContent === "New chat" && `+narrow),
				until(`document.querySelectorAll("#convs a").length === 2`),
				chromedp.Evaluate(`document.activeElement.blur(); true`, nil),
			)
			var found []string
			tb.run(t, `"/" goes to the box, and the server finds code in a message`,
				pressSlash(),
				until(`document.activeElement.id === "search-input" && document.activeElement.getBoundingClientRect().left >= 0`),
				chromedp.SendKeys("#search-input", "z = 5", chromedp.ByID),
				until(`document.querySelector("#search-status").textContent === "1 conversation matches “z = 5”"`),
				chromedp.Evaluate(hits, &found),
			)
			tb.shot(t, fmt.Sprintf("01-found-%d", size[0]))
			if len(found) != 1 || !strings.HasPrefix(found[0], "a long one|") || !strings.Contains(found[0], "z = 5") {
				t.Fatalf("hits %q", found)
			}
			var marks []string
			tb.run(t, "the words matched are marked", chromedp.Evaluate(`[...document.querySelectorAll("#convs .snippet mark")].map((m) => m.textContent)`, &marks))
			if len(marks) < 2 || marks[0] != "z" || marks[1] != "5" {
				t.Errorf("marked %q, want z and 5 first", marks)
			}
			var at struct {
				Hash    string  `json:"hash"`
				Focused bool    `json:"focused"`
				Top     float64 `json:"top"`
				Bottom  float64 `json:"bottom"`
				ListTop float64 `json:"listTop"`
				ListBot float64 `json:"listBottom"`
			}
			tb.run(t, "↓ and Enter open it at the message",
				chromedp.KeyEvent(kb.ArrowDown),
				until(`document.activeElement.matches("#convs a")`),
				chromedp.KeyEvent(kb.Enter),
				until(fmt.Sprintf(`document.querySelector('#messages li[data-msg="%d"].found') && document.activeElement.dataset.msg === "%d"`, match, match)),
				until(narrow),
				chromedp.Evaluate(fmt.Sprintf(`(() => { const li = document.querySelector('#messages li[data-msg="%d"]'), r = li.getBoundingClientRect(), l = document.querySelector("#messages").getBoundingClientRect();
  return { hash: location.hash, focused: document.activeElement === li, top: r.top, bottom: r.bottom, listTop: l.top, listBottom: l.bottom } })()`, match), &at),
			)
			tb.shot(t, fmt.Sprintf("02-opened-at-match-%d", size[0]))
			if at.Hash != fmt.Sprintf("#/c/%d/m/%d", long, match) || !at.Focused || at.Top < at.ListTop || at.Bottom > at.ListBot {
				t.Errorf("opened at %+v, want the matching message in view with the focus", at)
			}
			tb.run(t, "a title, as it is being typed",
				pressSlash(),
				until(`document.activeElement.id === "search-input"`),
				chromedp.Evaluate(`document.querySelector("#search-input").value = ""; true`, nil),
				chromedp.SendKeys("#search-input", "impo", chromedp.ByID),
				until(`document.querySelector("#search-status").textContent === "1 conversation matches “impo”"`),
				chromedp.Evaluate(hits, &found),
			)
			if len(found) != 1 || found[0] != "import sys|" {
				t.Errorf("hits %q, want the title import sys", found)
			}
			tb.run(t, "another user's conversations are not found",
				chromedp.Evaluate(`document.querySelector("#search-input").value = ""; true`, nil),
				chromedp.SendKeys("#search-input", "zanzibar", chromedp.ByID),
				until(`document.querySelector("#search-status").textContent === "1 conversation matches “zanzibar”"`),
				chromedp.Evaluate(hits, &found),
			)
			if len(found) != 1 || strings.Contains(found[0], "secret") {
				t.Errorf("hits %q", found)
			}
			tb.run(t, "Escape gives the list back",
				chromedp.KeyEvent(kb.Escape),
				until(`document.querySelector("#search-status").textContent === "" && document.querySelectorAll("#convs a").length === 2`),
			)
		})
	}
}
