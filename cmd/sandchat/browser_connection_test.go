package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// keptNote is a JS expression: the note under the message box about a kept message.
const keptNote = `document.querySelector("#send-note").textContent`

// TestBrowserServerRestart: the server stops in the middle of a long run. The page says
// so at once, in the header and on the running cell; a message sent meanwhile stays in
// the box with a plain sentence, no error; once a server answers at the address again,
// the page picks up by itself: the cell says the restart interrupted it and that its
// session went back to the state before it (true: the next cell reads the older
// value), and the kept message is sent, once.
func TestBrowserServerRestart(t *testing.T) {
	e := newEnv(t)
	quick := func(c *Config, _ *Main) { c.ShutdownTimeout = 4 * time.Second }
	m := e.sandboxNode(quick)
	addr := m.Addr()
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Analyst", "model": "builtin", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	if r := alice.run(conv, "i = -1"); r.Status != "success" {
		t.Fatalf("setup: %+v", r)
	}
	base := "http://" + addr
	dir := screenshotDir(t)
	tb := signedInTab(t, browser(t), "alice", dir, base, fmt.Sprintf("/#/c/%d", conv), alice.token, sizes[0])
	// The browser logs each request and socket that met the server gone: the page's own
	// words are what is checked.
	tb.allow("net::ERR_CONNECTION_REFUSED")
	tb.allow("net::ERR_EMPTY_RESPONSE")
	tb.allow("WebSocket connection to")
	tb.allow("the server responded with a status of 503")

	beat := `[...document.querySelectorAll("#messages .cell")].find((c) => c.textContent.includes("'beat'"))`
	tb.run(t, "a 20-second loop runs",
		until(`document.querySelector("#conv-title").textContent === "test"`),
		say(py("import time\nfor i in range(40):\n    print('beat', i, flush=True)\n    time.sleep(0.5)")),
		until(beat+`?.querySelector(".cell-out")?.textContent.includes("beat 2")`),
	)
	stopped := make(chan struct{})
	go func() { m.Close(); close(stopped) }()
	var status string
	tb.run(t, "the server stops: the header and the cell say so",
		until(`document.querySelector("#conn").textContent === "Reconnecting…"`),
		until(beat+`.querySelector(".status").textContent === "reconnecting…"`),
		chromedp.Evaluate(beat+`.querySelector(".status").textContent`, &status),
	)
	tb.shot(t, "01-reconnecting-1366")
	var inView bool
	tb.run(t, "at 390 px the header says so too",
		chromedp.EmulateViewport(sizes[1][0], sizes[1][1]),
		until(narrow),
		chromedp.Evaluate(`(() => { const r = document.querySelector("#conn").getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= innerWidth && document.documentElement.scrollWidth <= innerWidth })()`, &inView),
	)
	tb.shot(t, "02-reconnecting-390")
	if !inView {
		t.Error("at 390 px the header's Reconnecting… is not in view, or the page is wider than the screen")
	}
	const asked = "print('i is', i)"
	// The loop's turn shows as running (Stop in place of Send): Enter sends.
	tb.run(t, "a message sent meanwhile is kept, with a plain sentence",
		chromedp.EmulateViewport(sizes[0][0], sizes[0][1]),
		chromedp.SetValue("#input", py(asked), chromedp.ByID),
		chromedp.Focus("#input", chromedp.ByID),
		chromedp.KeyEvent(kb.Enter),
		until(keptNote+` === "Can't reach the server; your message is kept and will be sent when it answers."`),
	)
	tb.shot(t, "03-kept-1366")
	var box, toasts string
	tb.run(t, "nothing else is said",
		chromedp.Evaluate(`document.querySelector("#input").value`, &box),
		chromedp.Evaluate(`JSON.stringify(window.seenToasts)`, &toasts),
	)
	// (The driver's Enter types its newline even when the page refuses the key.)
	if strings.TrimSpace(box) != py(asked) || strings.Contains(toasts, "error") || strings.Contains(toasts, "Failed to fetch") {
		t.Errorf("while the server is down the box holds %q and the page showed %s", box, toasts)
	}
	select {
	case <-stopped:
	case <-time.After(60 * time.Second):
		t.Fatal("the server did not stop")
	}

	// A server answers at the same address again, on the same database and Redis.
	e.sandboxNode(quick, func(c *Config, _ *Main) { c.Addr = addr })
	var cell struct {
		Status string `json:"status"`
		Note   string `json:"note"`
		Out    string `json:"out"`
	}
	tb.run(t, "the page picks up by itself",
		until(`document.querySelector("#conn").textContent === ""`),
		until(beat+`.querySelector(".status").textContent === "interrupted by a server restart"`),
		chromedp.Evaluate(`({ status: `+beat+`.querySelector(".status").textContent, note: `+beat+`.querySelector(".stop-note")?.textContent ?? "",
			out: `+beat+`.querySelector(".cell-out").textContent })`, &cell),
	)
	if !strings.Contains(cell.Note, "went back to its last saved state, from before this cell") || !strings.Contains(cell.Out, "beat 2") {
		t.Errorf("the interrupted cell reads %+v", cell)
	}
	answer := `[...document.querySelectorAll("#messages .cell")].find((c) => c.querySelector(".cell-code").textContent.includes("i is"))`
	var out string
	var sent int
	tb.run(t, "the kept message is sent, once, and its code reads the state before the loop",
		until(answer+`?.dataset.done`),
		until(keptNote+` === "" && document.querySelector("#input").value === ""`),
		chromedp.Evaluate(answer+`.querySelector(".cell-out").textContent`, &out),
		chromedp.Evaluate(`[...document.querySelectorAll("#messages .msg.user")].filter((m) => m.textContent.includes("i is")).length`, &sent),
	)
	tb.shot(t, "04-picked-up-1366")
	if out != "i is -1\n" || sent != 1 {
		t.Errorf("the kept message was sent %d times; its cell printed %q, want i is -1 (the state before the interrupted loop)", sent, out)
	}
	tb.run(t, "at 390 px", chromedp.EmulateViewport(sizes[1][0], sizes[1][1]), until(narrow),
		chromedp.Evaluate(beat+`.scrollIntoView({ block: "center" }); true`, nil))
	tb.shot(t, "05-interrupted-390")
}

// TestBrowserOffline: with the browser offline, the header says "Offline", a message
// sent stays in the box with a sentence saying so, and goes out once the network is
// back; the page reconnects by itself.
func TestBrowserOffline(t *testing.T) {
	m := newEnv(t).node()
	alice, _ := m.user(t, "alice", false)
	conv := alice.createConversation(0)
	base := "http://" + m.Addr()
	dir := screenshotDir(t)
	tb := signedInTab(t, browser(t), "alice", dir, base, fmt.Sprintf("/#/c/%d", conv), alice.token, sizes[1])
	// The browser logs each request that met the network gone: the page's own words are
	// what is checked.
	tb.allow("net::ERR_INTERNET_DISCONNECTED")
	for _, size := range []([2]int64){sizes[1], sizes[0]} {
		text := fmt.Sprintf("sent while offline at %d px", size[0])
		tb.run(t, fmt.Sprintf("offline at %d px", size[0]),
			chromedp.EmulateViewport(size[0], size[1]),
			until(narrow),
			until(`document.querySelector("#conv-title").textContent === "test" && `+socketOpen),
			network.EmulateNetworkConditions(true, 0, -1, -1),
			until(`document.querySelector("#conn").textContent === "Offline"`),
			chromedp.SetValue("#input", text, chromedp.ByID),
			chromedp.Click("#send", chromedp.ByID),
			until(keptNote+` === "You are offline; your message is kept and will be sent when you are back online."`),
		)
		tb.shot(t, fmt.Sprintf("01-offline-%d", size[0]))
		var toasts string
		tb.run(t, "no error toast", chromedp.Evaluate(`JSON.stringify(window.seenToasts)`, &toasts))
		if strings.Contains(toasts, "error") {
			t.Errorf("offline, the page showed %s", toasts)
		}
		tb.run(t, "back online: it reconnects and sends",
			network.EmulateNetworkConditions(false, 0, -1, -1),
			until(`document.querySelector("#conn").textContent === "" && `+socketOpen),
			until(fmt.Sprintf(`[...document.querySelectorAll("#messages .msg.user")].filter((m) => m.textContent.includes(%q)).length === 1`, text)),
			until(keptNote+` === "" && document.querySelector("#input").value === ""`),
			until(`!document.querySelector("#send").hidden`),
		)
		tb.shot(t, fmt.Sprintf("02-back-online-%d", size[0]))
	}
	var msgs []messageJSON
	alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), nil, &msgs)
	users := 0
	for _, msg := range msgs {
		if msg.Role == "user" {
			users++
		}
	}
	if users != 2 {
		t.Errorf("%d user messages stored, want the two sent while offline, once each", users)
	}
}
