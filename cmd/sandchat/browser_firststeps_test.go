package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// sizes are the two widths every browser test of the web client looks at: a laptop's
// and a phone's.
var sizes = [][2]int64{{1366, 850}, {390, 844}}

// signedInTab opens a tab at base+path signed in with who's token, at width × height.
func signedInTab(t *testing.T, root context.Context, name, dir, base, path, token string, size [2]int64) *tab {
	t.Helper()
	tb := openTab(t, root, name, dir)
	tb.run(t, "sign in",
		chromedp.EmulateViewport(size[0], size[1]),
		chromedp.Navigate(base+path),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(`document.querySelector("#me").textContent !== "" && !document.querySelector("#chat-view").hidden`),
		until(socketOpen),
	)
	return tb
}

// narrow is a JS condition: at phone width the conversation list is a closed drawer.
const narrow = `(innerWidth > 720 || document.querySelector("#sidebar").getBoundingClientRect().right <= 0)`

// TestBrowserFirstSteps: what a new user meets first. With no conversation open the
// message box takes a message and sending it starts a chat with the agent chosen in the
// list (which, inside an agent's conversation, is that agent); the skip link goes to the
// message box and keeps the conversation open; files dropped anywhere on the chat are
// attached and nowhere is the page left for them; toasts move nothing and take no
// click; an agent's page lists every tool that is on; a chat without an agent is
// answered by "Assistant"; at phone width the rename row keeps the agent's name in view.
func TestBrowserFirstSteps(t *testing.T) {
	m := newEnv(t).node()
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Analyst", "model": "builtin", "internal_tools": map[string]bool{"data_analysis": true}})
	base := "http://" + m.Addr()
	dir := screenshotDir(t)
	root := browser(t)
	tb := signedInTab(t, root, "alice", dir, base, "/", alice.token, sizes[0])
	convOf := `Number(location.hash.match(/^#\/c\/(\d+)/)?.[1] || 0)`

	var first int64
	t.Run("with nothing open, typing starts a chat with the chosen agent", func(t *testing.T) {
		tb.run(t, "the box is ready",
			until(`!document.querySelector("#input").disabled && !document.querySelector("#send").disabled`),
			chromedp.SetValue("#conv-agent", fmt.Sprint(agent.ID), chromedp.ByID),
		)
		tb.shot(t, "01-nothing-open-1366")
		tb.run(t, "type and press Enter",
			chromedp.Focus("#input", chromedp.ByID),
			chromedp.SendKeys("#input", "hello from a first message", chromedp.ByID),
			chromedp.KeyEvent(kb.Enter),
			until(convOf+` > 0 && document.querySelector("#conv-agent-name").textContent === "with Analyst"`),
			until(`[...document.querySelectorAll("#messages .msg.user")].some((m) => m.textContent.includes("hello from a first message"))`),
			until(`[...document.querySelectorAll("#messages .msg.assistant .who")].some((w) => w.textContent === "Analyst")`),
			until(`document.querySelector("#input").value === ""`),
			chromedp.Evaluate(convOf, &first),
		)
		tb.shot(t, "02-first-chat-1366")
		// Inside an agent's conversation, the list's picker names that agent: New chat
		// (or a message typed with nothing open) starts with it.
		var picked string
		tb.run(t, "the picker follows the conversation", chromedp.Evaluate(`document.querySelector("#conv-agent").value`, &picked))
		if picked != fmt.Sprint(agent.ID) {
			t.Errorf("inside the agent's conversation the picker says %q, want the agent %d", picked, agent.ID)
		}
		var second int64
		tb.run(t, "at phone width, with nothing open, Send starts another with the same agent",
			chromedp.EmulateViewport(sizes[1][0], sizes[1][1]),
			chromedp.Evaluate(`location.hash = "#/"; true`, nil),
			until(`document.querySelector("#conv-title").textContent === "New chat" && `+narrow),
			chromedp.Evaluate(`document.querySelector("#conv-agent").value = "`+fmt.Sprint(agent.ID)+`"; true`, nil),
			chromedp.SendKeys("#input", "and a second one", chromedp.ByID),
			chromedp.Click("#send", chromedp.ByID),
			until(convOf+` > `+fmt.Sprint(first)+` && document.querySelector("#conv-agent-name").textContent === "with Analyst"`),
			until(`[...document.querySelectorAll("#messages .msg.user")].some((m) => m.textContent.includes("and a second one"))`),
			chromedp.Evaluate(convOf, &second),
		)
		tb.shot(t, "03-second-chat-390")
		var convs []struct {
			ID      int64  `json:"id"`
			AgentID *int64 `json:"agent_id"`
			Title   string `json:"title"`
		}
		alice.must(200, "GET", "/api/v1/conversations", nil, &convs)
		if len(convs) != 2 || convs[0].AgentID == nil || *convs[0].AgentID != agent.ID || convs[1].AgentID == nil || *convs[1].AgentID != agent.ID {
			t.Fatalf("conversations %+v, want two with the agent", convs)
		}
	})

	t.Run("the skip link goes to the message box and keeps the conversation", func(t *testing.T) {
		for _, size := range sizes {
			var hash, title, focused string
			// The skip link is the page's first stop: where a keyboard user coming from the
			// browser's own controls lands (the driver cannot press Tab there).
			var firstStop string
			tb.run(t, fmt.Sprintf("at %d px, at the skip link", size[0]),
				chromedp.EmulateViewport(size[0], size[1]),
				chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"; true`, first), nil),
				until(`document.querySelector("#conv-title").textContent !== "New chat" && document.querySelector("#messages .msg.user")`),
				chromedp.Evaluate(`[...document.querySelectorAll("a[href], button, input, select, textarea")].find((e) => e.checkVisibility() || e.id === "skip").id`, &firstStop),
				until(narrow),
				chromedp.Focus("#skip", chromedp.ByID),
				until(`document.activeElement.id === "skip" && document.activeElement.getBoundingClientRect().left >= 0`),
			)
			if firstStop != "skip" {
				t.Errorf("at %d px the page's first stop is %q, not the skip link", size[0], firstStop)
			}
			tb.shot(t, fmt.Sprintf("04-skip-link-%d", size[0]))
			tb.run(t, "Enter",
				chromedp.KeyEvent(kb.Enter),
				until(`document.activeElement.id === "input"`),
				chromedp.Evaluate(`location.hash`, &hash),
				chromedp.Evaluate(`document.querySelector("#conv-title").textContent`, &title),
				chromedp.Evaluate(`document.activeElement.id`, &focused),
			)
			if hash != fmt.Sprintf("#/c/%d", first) || title == "New chat" || focused != "input" {
				t.Errorf("at %d px after the skip link: address %q, title %q, focus on %q", size[0], hash, title, focused)
			}
			var disabled bool
			tb.run(t, "the box takes a message", chromedp.Evaluate(`document.querySelector("#input").disabled || document.querySelector("#send").disabled`, &disabled))
			if disabled {
				t.Errorf("at %d px the message box is disabled after the skip link", size[0])
			}
		}
	})

	t.Run("files dropped anywhere on the chat are attached, and nowhere leave the page", func(t *testing.T) {
		// A drop as a browser delivers one: dragenter, dragover and drop with a file. The
		// page must cancel dragover and drop (a browser left to itself opens the file in
		// place of the page) and attach the file when it lands on the chat.
		drop := func(selector, name string) string {
			return fmt.Sprintf(`(() => {
  const target = document.querySelector(%q), r = target.getBoundingClientRect();
  const dt = new DataTransfer();
  dt.items.add(new File(["id,n\n1,2\n"], %q, { type: "text/csv" }));
  const at = { bubbles: true, cancelable: true, dataTransfer: dt, clientX: r.left + r.width / 2, clientY: r.top + r.height / 2 };
  target.dispatchEvent(new DragEvent("dragenter", at));
  const cancelled = [];
  cancelled.push(!target.dispatchEvent(new DragEvent("dragover", at)));
  cancelled.push(!target.dispatchEvent(new DragEvent("drop", at)));
  return cancelled.join(",");
})()`, selector, name)
		}
		for i, size := range sizes {
			name := fmt.Sprintf("dropped-%d.csv", size[0])
			var cancelled string
			tb.run(t, fmt.Sprintf("at %d px, a drop on the messages", size[0]),
				chromedp.EmulateViewport(size[0], size[1]),
				until(`document.querySelector("#messages .msg.user")`),
				chromedp.Evaluate(drop("#messages", name), &cancelled),
				until(fmt.Sprintf(`[...document.querySelectorAll("#attachments .chip-row:not(.uploading) .chip")].some((c) => c.textContent.includes(%q))`, name)),
			)
			if cancelled != "true,true" {
				t.Errorf("at %d px dragover and drop on the messages were cancelled: %s, want both", size[0], cancelled)
			}
			var files []struct{ Name string }
			alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/files", first), nil, &files)
			if len(files) != i+1 || files[i].Name != name {
				t.Errorf("files %+v after the drop of %s", files, name)
			}
		}
		var cancelled string
		tb.run(t, "a drop on the list of conversations is refused, not opened",
			chromedp.EmulateViewport(sizes[0][0], sizes[0][1]),
			chromedp.Evaluate(drop("#convs", "refused.csv"), &cancelled),
			until(`!document.querySelector("#attachments .uploading")`),
		)
		tb.shot(t, "05-dropped")
		if cancelled != "true,true" {
			t.Errorf("dragover and drop on the conversation list were cancelled: %s, want both", cancelled)
		}
		var files []struct{ Name string }
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/files", first), nil, &files)
		if len(files) != 2 {
			t.Errorf("files %+v: a drop outside the chat was attached", files)
		}
	})

	t.Run("a toast moves nothing and takes no click", func(t *testing.T) {
		for _, size := range sizes {
			type spot struct{ X, Y float64 }
			var before, during spot
			var hit string
			where := `(() => { const r = document.querySelector("#rename").getBoundingClientRect(); return { X: r.left + r.width / 2, Y: r.top + r.height / 2 } })()`
			tb.run(t, fmt.Sprintf("at %d px, where Rename is", size[0]),
				chromedp.EmulateViewport(size[0], size[1]),
				until(`!document.querySelector(".toast")`),
				until(narrow),
				chromedp.Evaluate(where, &before),
			)
			// Every tab of the user gets this toast.
			alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", first), map[string]any{"enabled": size[0] == 1366}, nil)
			tb.run(t, "while the toast shows",
				until(hasToast("Internal tools configuration updated")),
				chromedp.Evaluate(where, &during),
				chromedp.Evaluate(`(() => { const r = document.querySelector(".toast").getBoundingClientRect(); const e = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2); return e.id || e.tagName })()`, &hit),
			)
			tb.shot(t, fmt.Sprintf("06-toast-%d", size[0]))
			if before != during {
				t.Errorf("at %d px the toast moved Rename from %v to %v", size[0], before, during)
			}
			if hit == "" || strings.Contains(hit, "toast") {
				t.Errorf("at %d px a click on the toast lands on %q", size[0], hit)
			}
			var overlaps []string
			tb.run(t, "it covers no control", chromedp.Evaluate(toastOverlaps, &overlaps))
			if len(overlaps) > 0 {
				t.Errorf("at %d px: %q", size[0], overlaps)
			}
		}
	})

	t.Run("at phone width the rename row keeps the agent's name in view", func(t *testing.T) {
		var right, width float64
		tb.run(t, "rename at 390 px",
			chromedp.EmulateViewport(sizes[1][0], sizes[1][1]),
			until(narrow),
			press("button", "Rename", ""),
			until(`!document.querySelector("#rename-form").hidden && document.activeElement.id === "rename-input"`),
			chromedp.Evaluate(`document.querySelector("#conv-agent-name").getBoundingClientRect().right`, &right),
			chromedp.Evaluate(`document.documentElement.scrollWidth`, &width),
		)
		tb.shot(t, "07-rename-390")
		if right > 390 || width > 390 {
			t.Errorf("renaming at 390 px: the agent's name ends at %v, the page is %v px wide", right, width)
		}
		tb.run(t, "Escape ends it", chromedp.KeyEvent(kb.Escape), until(`document.querySelector("#rename-form").hidden`))
	})

	t.Run("a chat without an agent is answered by Assistant", func(t *testing.T) {
		plain := alice.createConversation(0)
		alice.say(plain, "a question without an agent")
		var who []string
		tb.run(t, "open it",
			chromedp.EmulateViewport(sizes[0][0], sizes[0][1]),
			chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"; true`, plain), nil),
			until(`document.querySelector("#messages .msg.user")?.textContent.includes("a question without an agent") && document.querySelector("#messages .msg.assistant")`),
			chromedp.Evaluate(`[...document.querySelectorAll("#messages .msg.assistant .who")].map((w) => w.textContent)`, &who),
		)
		if len(who) == 0 || who[0] != "Assistant" {
			t.Errorf("the answer reads %q, want Assistant", who)
		}
		var picked string
		tb.run(t, "the picker says no agent here", chromedp.Evaluate(`document.querySelector("#conv-agent").value`, &picked))
		if picked != "" {
			t.Errorf("inside a chat without an agent the picker says %q", picked)
		}
	})

	t.Run("an agent's page lists every tool that is on", func(t *testing.T) {
		for _, size := range sizes {
			var listed []string
			tb.run(t, fmt.Sprintf("at %d px, after a reload", size[0]),
				chromedp.EmulateViewport(size[0], size[1]),
				chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/agents/%d"; true`, agent.ID), nil),
				chromedp.Reload(),
				until(`document.querySelector("#agent-title").textContent === "Analyst"`),
				until(`document.querySelector("#agent-tools li")`),
				chromedp.Evaluate(`[...document.querySelectorAll("#agent-tools [role=switch]")].map((s) => s.getAttribute("aria-label") + ":" + s.getAttribute("aria-checked"))`, &listed),
				chromedp.Evaluate(`document.querySelector("#agent-tools").scrollIntoView(); true`, nil),
			)
			tb.shot(t, fmt.Sprintf("08-agent-tools-%d", size[0]))
			if !strings.Contains(strings.Join(listed, ","), "Data analysis:true") {
				t.Errorf("at %d px the agent's page lists %q without Show all, want Data analysis on among them", size[0], listed)
			}
		}
	})
}
