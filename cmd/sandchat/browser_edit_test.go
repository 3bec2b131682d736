package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
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

// TestBrowserEditAndRegenerate: under the last answer Regenerate has the message
// answered again, and the new answer comes in under the first; Edit turns one's own
// latest message into a box whose Send replaces the text and has the new text answered,
// while another tab of the conversation redraws the message live. A viewer gets
// neither.
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

	tb.run(t, "sign in and open the conversation",
		chromedp.EmulateViewport(1366, 850),
		chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(`document.querySelector("#conv-title").textContent === "test" && !document.querySelector("#input").disabled`),
	)
	tb.run(t, "send Python: it is answered, with Regenerate under the answer and Edit on the message",
		say(py("print(6 * 7)")),
		until(lastCell+`?.querySelector(".cell-out").textContent === "42\n"`),
		until(`document.querySelector("#messages > li.msg-actions")?.previousElementSibling.matches(".msg.assistant")`),
		until(lastUser+`.querySelector(".msg-tools button")?.textContent === "Edit"`),
	)
	tb.shot(t, "01-answered-1366")

	tb.run(t, "Regenerate: a second answer comes in under the first",
		press("button", "Regenerate", ""),
		until(`document.querySelectorAll("#messages .cell").length === 2`),
		until(lastCell+`.querySelector(".status").textContent.startsWith("done") && `+lastCell+`.querySelector(".cell-out").textContent === "42\n"`),
		until(`document.querySelectorAll("#messages > li.msg.assistant").length === 2`),
		until(`document.querySelectorAll("#messages > li.msg-actions").length === 1`),
	)
	tb.shot(t, "02-regenerated-1366")

	tab2 := openTab(t, root, "alice, tab 2", dir)
	tab2.run(t, "a second tab of the conversation",
		chromedp.EmulateViewport(1366, 850),
		chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
		until(`document.querySelectorAll("#messages .cell").length === 2`),
	)

	tb.run(t, "Edit, then Cancel, leaves the message as it was",
		press("button", "Edit", ""),
		until(editBox+`.value === `+jsString(py("print(6 * 7)"))),
		until(`document.activeElement === `+editBox),
		none("button", "Edit"),
		press("button", "Cancel", ""),
		until(`!`+editBox),
		until(lastUser+`.querySelector(".md").textContent.includes("print(6 * 7)")`),
	)
	tb.run(t, "Edit the message",
		press("button", "Edit", ""),
		until(editBox+`.value === `+jsString(py("print(6 * 7)"))),
		until(`(() => { const b = `+editBox+`.getBoundingClientRect(), l = document.querySelector("#messages").getBoundingClientRect(); return b.top >= l.top - 1 && b.bottom <= l.bottom + 1 })()`),
		chromedp.SetValue(`#messages > li.msg.user.editing textarea`, py("print(7 * 7)"), chromedp.ByQuery),
	)
	tb.shot(t, "03-editing-1366")
	tb.run(t, "Send: the new text is shown and answered",
		press("button", "Send", "#messages"),
		until(`!`+editBox),
		until(lastUser+`.querySelector(".md").textContent.includes("print(7 * 7)") && !`+lastUser+`.textContent.includes("6 * 7")`),
		until(`document.querySelectorAll("#messages .cell").length === 3`),
		until(lastCell+`.querySelector(".status").textContent.startsWith("done") && `+lastCell+`.querySelector(".cell-out").textContent === "49\n"`),
		until(`document.querySelector("#messages > li.msg-actions")`),
	)
	tb.shot(t, "04-edited-1366")
	tab2.run(t, "the other tab shows the edited message and its answer live",
		until(lastUser+`.querySelector(".md").textContent.includes("print(7 * 7)") && !`+lastUser+`.textContent.includes("6 * 7")`),
		until(lastCell+`?.querySelector(".cell-out").textContent === "49\n"`),
	)
	tb.run(t, "after a reload, the edited text stays",
		chromedp.Reload(),
		until(`document.querySelectorAll("#messages .cell").length === 3`),
		until(lastUser+`.querySelector(".md").textContent.includes("print(7 * 7)")`),
	)
	tb.run(t, "at phone width, editing",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateTouch),
		press("button", "Edit", ""),
		until(editBox+`.getBoundingClientRect().right <= 390`),
	)
	tb.shot(t, "05-editing-390")
	tb.run(t, "cancel at phone width", press("button", "Cancel", ""), until(`!`+editBox))
	tb.shot(t, "06-answered-390")

	vt := openTab(t, browser(t), "vera", dir)
	vt.run(t, "a viewer gets neither Regenerate nor Edit",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateTouch),
		chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", vera.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(`document.querySelectorAll("#messages .cell").length === 3`),
		none("button", "Regenerate"),
		none("button", "Edit"),
	)
}
