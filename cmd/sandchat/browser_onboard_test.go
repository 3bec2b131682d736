package main

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
)

// offerButton is the button where code met the Python sandbox off.
const offerButton = `document.querySelector("#messages > li.offer button")`

// TestBrowserOnboard: a newcomer's first code, in a new chat with no agent, meets the
// Python sandbox off. The answer says so, and right under it one click switches the
// sandbox on (every tab gets the toast) and runs that code, whose answer replaces the
// one that said the sandbox was off (answer 2 of 2) and stays after a reload. A viewer of such a conversation is told why the code did not run, with no
// button.
func TestBrowserOnboard(t *testing.T) {
	e := newEnv(t)
	m := e.sandboxNode()
	nina, _ := m.user(t, "nina", false)
	vic, vicID := m.user(t, "vic", false)
	base := "http://" + m.Addr()
	dir := screenshotDir(t)
	root := browser(t)
	tb := openTab(t, root, "nina", dir)

	tb.run(t, "sign in and start a chat with no agent",
		chromedp.EmulateViewport(1366, 850),
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", nina.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		chromedp.WaitVisible("#chat-view", chromedp.ByID),
		until(`document.querySelector("#conv-agent").value === ""`),
		chromedp.Click("#new-conv button", chromedp.ByQuery),
		until(`!document.querySelector("#input").disabled`),
		until(`document.querySelector('[data-tool="pyodide_sandbox"] .source')?.textContent === "From the deployment default (off)"`),
	)
	tb.run(t, "send Python: the answer says the sandbox is off, and offers to switch it on",
		say(py("x = 6 * 7\nprint(x)")),
		until(`[...document.querySelectorAll("#messages .msg.assistant")].some((m) => m.textContent.includes("The Python sandbox is off here"))`),
		until(offerButton+`?.textContent === "Turn on Python sandbox and run"`),
		until(`document.querySelector("#messages > li.offer").textContent.includes("so this code was not run")`),
		until(`!document.querySelector("#messages .cell")`),
	)
	tb.shot(t, "01-offer-1366")

	tb.run(t, "one click: the sandbox goes on, the toast comes, the code runs",
		chromedp.Click(`#messages > li.offer button`, chromedp.ByQuery),
		until(hasToastDetail("Internal tools configuration updated", "Python sandbox: on")),
		until(toolsButton("Internal tools: Python sandbox on", "Python")),
		until(lastCell+`?.querySelector(".status").textContent.startsWith("done")`),
		until(lastCell+`.querySelector(".cell-out").textContent === "42\n"`),
		until(`!document.querySelector("#messages > li.offer")`),
		until(`document.activeElement.id === "input"`),
		// The answer that said the sandbox was off is the first version, not shown.
		until(versionsOf("Answer 2 of 2")),
		until(`!`+shownText+`.includes("The Python sandbox is off here")`),
	)
	tb.shot(t, "02-ran-1366")
	tb.run(t, "after a reload the run is there, and neither the offer nor the answer it replaced",
		chromedp.Reload(),
		until(lastCell+`?.querySelector(".cell-out").textContent === "42\n"`),
		until(versionsOf("Answer 2 of 2")),
		until(`!`+shownText+`.includes("The Python sandbox is off here")`),
		until(`!document.querySelector("#messages > li.offer")`),
	)

	// A conversation whose code met the sandbox off, shared with a viewer.
	conv := nina.createConversation(0)
	if status, answer := nina.say(conv, py("print('hi')")); status != "completed" || answer == "" {
		t.Fatalf("turn %s %q", status, answer)
	}
	nina.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": vicID, "role": "viewer"}, nil)
	tb.run(t, "the owner sees the offer at phone width",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateTouch),
		chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"`, conv), nil),
		until(offerButton+`?.textContent === "Turn on Python sandbox and run"`),
		until(`document.querySelector("#messages > li.offer").getBoundingClientRect().right <= 390`),
	)
	tb.shot(t, "03-offer-390")

	// Vic signs in on a browser of his own, whose storage (the token) is not Nina's.
	vt := openTab(t, browser(t), "vic", dir)
	vt.run(t, "the viewer reads why the code did not run, with no button",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateTouch),
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", vic.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		chromedp.WaitVisible("#chat-view", chromedp.ByID),
		chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"`, conv), nil),
		until(`document.querySelector("#messages > li.offer")?.textContent.includes("Only its owner or an editor can switch it on")`),
		until(`!`+offerButton),
	)
	vt.shot(t, "04-viewer-390")
	vt.run(t, "the viewer at desktop width", chromedp.EmulateViewport(1366, 850), until(`!`+offerButton))
	vt.shot(t, "05-viewer-1366")
}
