package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// editBox is the box Edit turns the latest user message into.
const editBox = `document.querySelector("#messages > li.msg.user.editing textarea")`

// lastUser is a JS expression for the latest user message drawn.
const lastUser = `[...document.querySelectorAll("#messages > li.msg.user")].pop()`

// none fails unless the page has no control of role and name.
func none(role, name string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var found []cdp.BackendNodeID
		if err := controls(role, name, "", &found).Do(ctx); err != nil {
			return err
		}
		if len(found) > 0 {
			return fmt.Errorf("%d %ss named %q, want none", len(found), role, name)
		}
		return nil
	})
}

// shownText is a JS expression: the messages as drawn, what is hidden left out.
const shownText = `document.querySelector("#messages").innerText`

// versionsOf is a JS condition: the latest user message's switcher reads label.
func versionsOf(label string) string {
	return lastUser + `.querySelector(".versions")?.getAttribute("aria-label") === ` + jsString(label)
}

// TestBrowserEditAndRegenerate: Regenerate and Edit answer the latest message again, and
// the new answer replaces the earlier one in place: under the message, ‹ 2 / 2 › switches
// between them, with the mouse or the keyboard, and the server keeps which one is shown
// (after a reload, in another tab). Edit's text is part of its version: switching back
// brings back the text that was answered. At phone width the switcher fits beside Edit;
// a viewer sees the current answer, and neither Regenerate, Edit nor the switcher.
func TestBrowserEditAndRegenerate(t *testing.T) {
	e := newEnv(t)
	m := e.sandboxNode()
	alice, _ := m.user(t, "alice", false)
	vera, veraID := m.user(t, "vera", false)
	agent := alice.createAgent(map[string]any{"name": "Analyst", "model": "builtin", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": veraID, "role": "viewer"}, nil)
	base := "http://" + m.Addr()
	dir := screenshotDir(t)
	root := browser(t)
	tb := openTab(t, root, "alice", dir)
	// Each run of it prints a new number: the answers differ.
	code := py("n = globals().get('n', 0) + 1\nprint('answer', n)")
	shows := func(n int) string {
		return fmt.Sprintf(`%s.includes("answer %d\n") && [1, 2, 3, 4].every((k) => k === %d || !%s.includes("answer " + k + "\n"))`, shownText, n, n, shownText)
	}
	idle := `document.querySelector("#send").hidden === false`

	tb.run(t, "sign in and open the conversation",
		chromedp.EmulateViewport(1366, 850),
		chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(`document.querySelector("#conv-title").textContent === "test" && !document.querySelector("#input").disabled`),
	)
	tb.run(t, "send Python: it is answered, with Regenerate under the answer and Edit on the message, and no versions",
		say(code),
		until(lastCell+`?.querySelector(".cell-out")?.textContent === "answer 1\n" && `+idle),
		until(`document.querySelector("#messages > li.msg-actions")?.previousElementSibling.matches(".msg.assistant")`),
		until(lastUser+`.querySelector(".msg-tools button")?.textContent === "Edit"`),
		until(`!`+lastUser+`.querySelector(".versions")`),
		none("button", "Previous answer"),
	)
	tb.shot(t, "01-answered-1366")

	tb.run(t, "Regenerate: the second answer replaces the first in place, as answer 2 of 2",
		press("button", "Regenerate", ""),
		until(versionsOf("Answer 2 of 2")),
		until(shows(2)+` && `+idle),
		until(`[...document.querySelectorAll("#messages > li")].filter((l) => l.getClientRects().length && l.matches(".cell, .msg.assistant")).length === 2`),
		until(`document.querySelectorAll("#messages > li.msg-actions").length === 1 && document.querySelector("#messages > li.msg-actions").previousElementSibling.textContent.includes("answer 2")`),
	)
	tb.shot(t, "02-regenerated-1366")

	tb.run(t, "with the keyboard, back to the first answer",
		chromedp.Focus(`#messages .versions button[aria-label="Previous answer"]`, chromedp.ByQuery),
		chromedp.KeyEvent(kb.Enter),
		until(versionsOf("Answer 1 of 2")),
		until(shows(1)),
		until(lastUser+`.querySelector(".version-count").textContent === "1 / 2"`),
		// The button that came to its end handed the focus on.
		until(`document.activeElement?.getAttribute("aria-label") === "Next answer"`),
	)
	tb.shot(t, "03-first-answer-1366")
	tb.run(t, "after a reload, the first answer is still the one shown",
		chromedp.Reload(),
		until(versionsOf("Answer 1 of 2")),
		until(shows(1)),
		until(`document.querySelector("#messages > li.msg-actions")?.previousElementSibling.textContent.includes("answer 1")`),
	)

	tab2 := openTab(t, root, "alice, tab 2", dir)
	tab2.run(t, "a second tab of the conversation shows the first answer too",
		chromedp.EmulateViewport(1366, 850),
		chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
		until(versionsOf("Answer 1 of 2")),
		until(shows(1)),
	)
	tb.run(t, "the next answer again, with the mouse",
		press("button", "Next answer", ""),
		until(versionsOf("Answer 2 of 2")),
		until(shows(2)),
	)
	tab2.run(t, "the other tab follows", until(versionsOf("Answer 2 of 2")), until(shows(2)))

	tb.run(t, "Edit, then Cancel, leaves the message as it was",
		press("button", "Edit", ""),
		until(editBox+`.value === `+jsString(code)),
		until(`document.activeElement === `+editBox),
		none("button", "Edit"),
		press("button", "Cancel", ""),
		until(`!`+editBox),
		until(lastUser+`.querySelector(".md").textContent.includes("globals()")`),
	)
	edited := py("import time\ntime.sleep(1.5)\nprint('edited', 7 * 7)")
	tb.run(t, "Edit the message",
		press("button", "Edit", ""),
		until(editBox+`.value === `+jsString(code)),
		until(`(() => { const b = `+editBox+`.getBoundingClientRect(), l = document.querySelector("#messages").getBoundingClientRect(); return b.top >= l.top - 1 && b.bottom <= l.bottom + 1 })()`),
		chromedp.SetValue(`#messages > li.msg.user.editing textarea`, edited, chromedp.ByQuery),
	)
	tb.shot(t, "04-editing-1366")
	tb.run(t, "Send: the new text is shown and answered, as answer 3 of 3; while it runs the switcher waits",
		press("button", "Send", "#messages"),
		until(`!`+editBox),
		until(versionsOf("Answer 3 of 3")),
		until(`document.querySelector("#send").hidden && [...`+lastUser+`.querySelectorAll(".versions button")].every((b) => b.disabled)`),
		until(lastUser+`.querySelector(".md").textContent.includes("edited") && !`+lastUser+`.textContent.includes("globals()")`),
		until(shownText+`.includes("edited 49\n") && !`+shownText+`.includes("answer 2\n") && `+idle),
		until(`document.querySelector("#messages > li.msg-actions")`),
	)
	tb.shot(t, "05-edited-1366")
	tab2.run(t, "the other tab shows the edited message and its answer live",
		until(versionsOf("Answer 3 of 3")),
		until(lastUser+`.querySelector(".md").textContent.includes("edited") && !`+lastUser+`.textContent.includes("globals()")`),
		until(shownText+`.includes("edited 49\n") && !`+shownText+`.includes("answer 2\n")`),
	)
	tb.run(t, "back to answer 2: the text it answered comes back with it",
		press("button", "Previous answer", ""),
		until(versionsOf("Answer 2 of 3")),
		until(lastUser+`.querySelector(".md").textContent.includes("globals()") && !`+lastUser+`.textContent.includes("edited")`),
		until(shows(2)+` && !`+shownText+`.includes("edited 49")`),
	)
	tb.run(t, "after a reload, answer 2 and its text stay",
		chromedp.Reload(),
		until(versionsOf("Answer 2 of 3")),
		until(lastUser+`.querySelector(".md").textContent.includes("globals()")`),
		until(shows(2)),
	)
	var r struct {
		Fits  bool    `json:"fits"`
		Apart bool    `json:"apart"`
		Small float64 `json:"small"`
		Wide  bool    `json:"wide"`
	}
	layout := chromedp.Evaluate(`(() => { const u = `+lastUser+`, v = u.querySelector(".versions"), e = [...u.querySelectorAll(".msg-tools button")].find((b) => b.textContent === "Edit"), ur = u.getBoundingClientRect(), vr = v.getBoundingClientRect(), er = e.getBoundingClientRect();
  return { fits: vr.left >= ur.left && vr.right <= ur.right && vr.right <= innerWidth, apart: vr.right <= er.left || er.right <= vr.left || vr.bottom <= er.top || er.bottom <= vr.top,
    small: Math.min(...[...v.querySelectorAll("button")].map((b) => Math.min(b.getBoundingClientRect().width, b.getBoundingClientRect().height))),
    wide: document.documentElement.scrollWidth > innerWidth || document.querySelector("#messages").scrollWidth > document.querySelector("#messages").clientWidth } })()`, &r)
	for _, size := range [][2]int64{{1366, 850}, {390, 844}} {
		opts := []chromedp.EmulateViewportOption{}
		if size[0] < 720 {
			opts = append(opts, chromedp.EmulateTouch)
		}
		tb.run(t, fmt.Sprintf("the switcher at %d px", size[0]),
			chromedp.EmulateViewport(size[0], size[1], opts...),
			chromedp.Evaluate(lastUser+`.scrollIntoView({ block: "center" }); true`, nil),
			until(`innerWidth > 720 || document.querySelector("#sidebar").getBoundingClientRect().right <= 0`),
			layout,
		)
		tb.shot(t, fmt.Sprintf("06-switcher-%d", size[0]))
		if !r.Fits || !r.Apart || r.Small < 32 || r.Wide {
			t.Errorf("at %d px the switcher: inside the message %v, apart from Edit %v, smallest button side %v px, the page scrolls sideways %v", size[0], r.Fits, r.Apart, r.Small, r.Wide)
		}
	}
	tb.run(t, "at phone width, a tap switches",
		press("button", "Next answer", ""),
		until(versionsOf("Answer 3 of 3")),
		until(shownText+`.includes("edited 49\n")`),
	)
	tb.run(t, "at phone width, editing",
		press("button", "Edit", ""),
		until(editBox+`.getBoundingClientRect().right <= 390`),
	)
	tb.shot(t, "07-editing-390")
	tb.run(t, "cancel at phone width", press("button", "Cancel", ""), until(`!`+editBox))

	vt := openTab(t, browser(t), "vera", dir)
	vt.run(t, "a viewer sees the current answer, and neither Regenerate, Edit nor the switcher",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateTouch),
		chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", vera.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(shownText+`.includes("edited 49\n") && !`+shownText+`.includes("answer 2\n")`),
		none("button", "Regenerate"),
		none("button", "Edit"),
		none("button", "Previous answer"),
	)
	vt.shot(t, "08-viewer-390")
}
