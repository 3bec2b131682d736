package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

// browser starts headless Chromium; tabs opened from the returned context share it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: run `make services` (it installs Debian's chromium)")
	}
	profile, err := os.MkdirTemp("", "sandchat-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.UserDataDir(profile))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx) // closes the browser and waits for it
		cancel()
		cancelAlloc()
		_ = os.RemoveAll(profile)
	})
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// screenshotDir is where browser tests leave their screenshots: $SANDCHAT_SCREENSHOTS,
// or a directory under the system's temporary directory named after the test.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("SANDCHAT_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "sandchat-browser", t.Name())
	}
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// tab is one browser tab that records every page error: uncaught exceptions, console
// errors and error log entries (CSP violations among them). The test fails on any.
type tab struct {
	name string
	ctx  context.Context
	dir  string

	mu     sync.Mutex
	errors []string
	// allowed are substrings of network errors a step expects (a 409 it provokes).
	allowed []string
}

func openTab(t *testing.T, root context.Context, name, dir string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(root)
	t.Cleanup(cancel)
	tb := &tab{name: name, ctx: ctx, dir: dir}
	verbose := os.Getenv("SANDCHAT_BROWSER_LOG") != "" // every request and response in the test's log
	chromedp.ListenTarget(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
			tb.fail("exception: " + msg)
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.APITypeError || e.Type == runtime.APITypeAssert {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				tb.fail("console.error: " + strings.Join(parts, " "))
			}
		case *network.EventRequestWillBeSent:
			if verbose {
				t.Logf("%s: %s %s", name, e.Request.Method, e.Request.URL)
			}
		case *network.EventResponseReceived:
			if verbose {
				t.Logf("%s: %d %s", name, e.Response.Status, e.Response.URL)
			}
		case *page.EventJavascriptDialogOpening:
			// A dialog blocks the page: note it and dismiss it so the test can go on.
			tb.fail("unexpected dialog: " + e.Message)
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(false)) }()
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.LevelError {
				tb.fail(fmt.Sprintf("log (%s): %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL))
			}
		}
	})
	// A tab is opened by its first Run, and closed when that Run's context ends: open
	// it with its own long-lived context before the timed steps.
	if err := chromedp.Run(ctx, chromedp.ActionFunc(func(ctx context.Context) error {
		if verbose {
			if err := network.Enable().Do(ctx); err != nil {
				return err
			}
		}
		for _, script := range []string{toastLog, socketLog} {
			if _, err := page.AddScriptToEvaluateOnNewDocument(script).Do(ctx); err != nil {
				return err
			}
		}
		return cdplog.Enable().Do(ctx)
	})); err != nil {
		t.Fatalf("open tab: %v", err)
	}
	t.Cleanup(func() { tb.check(t) })
	return tb
}

// toastLog keeps every toast a page shows (they go after a few seconds) in
// window.seenToasts, for a failed step to say: an error toast is often its cause.
const toastLog = `addEventListener("DOMContentLoaded", () => {
	const box = document.getElementById("toasts"), seen = new WeakSet();
	window.seenToasts = [];
	if (box) new MutationObserver(() => box.querySelectorAll(".toast").forEach((t) => {
		if (!seen.has(t)) { seen.add(t); seenToasts.push(t.className + ": " + t.textContent); }
	})).observe(box, { childList: true, subtree: true });
});`

// socketLog keeps what the page's WebSockets did (opened, closed and why) in
// window.socketLog, for a failed step to say, and the addresses they opened in
// window.socketURLs. A toast goes out on the user's channel to the
// sockets open then and is not replayed: a step that waits for one starts once the page's
// socket is open (socketOpen).
const socketLog = `(() => {
	const Real = window.WebSocket;
	let last = null;
	window.socketLog = [];
	window.socketURLs = [];
	window.socketOpen = () => last?.readyState === Real.OPEN;
	window.WebSocket = class extends Real {
		constructor(...args) {
			super(...args);
			last = this;
			socketURLs.push(String(args[0]));
			const t0 = performance.now(), ms = () => Math.round(performance.now() - t0) + " ms";
			this.addEventListener("open", () => socketLog.push("opened after " + ms()));
			this.addEventListener("close", (e) => socketLog.push("closed after " + ms() + ": " + e.code + " " + e.reason));
		}
	};
})()`

// socketOpen is a JS condition: the page's newest WebSocket is open.
const socketOpen = `window.socketOpen()`

func (tb *tab) fail(msg string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, a := range tb.allowed {
		if strings.Contains(msg, a) {
			return
		}
	}
	tb.errors = append(tb.errors, msg)
}

func (tb *tab) allow(substr string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.allowed = append(tb.allowed, substr)
}

// check fails t if the page reported any error so far.
func (tb *tab) check(t *testing.T) {
	t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.errors) > 0 {
		t.Errorf("%s: page errors:\n%s", tb.name, strings.Join(tb.errors, "\n"))
		tb.errors = nil
	}
}

// run performs the actions within a minute; on failure it saves a screenshot and the page.
func (tb *tab) run(t *testing.T, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, time.Minute)
	defer cancel()
	// A background tab paints no frames (screenshots and clicks wait for one): act in
	// the foreground.
	actions = append([]chromedp.Action{page.BringToFront()}, actions...)
	if err := chromedp.Run(ctx, actions...); err != nil {
		var html string
		var png []byte
		dctx, dcancel := context.WithTimeout(tb.ctx, 5*time.Second)
		defer dcancel()
		var toasts, sockets string
		_ = chromedp.Run(dctx, page.BringToFront(), chromedp.Evaluate(`JSON.stringify(window.seenToasts || [])`, &toasts),
			chromedp.Evaluate(`JSON.stringify(window.socketLog || [])`, &sockets),
			chromedp.OuterHTML("html", &html, chromedp.ByQuery), chromedp.CaptureScreenshot(&png))
		name := filepath.Join(tb.dir, "failure-"+strings.NewReplacer(" ", "-", "/", "-", "'", "").Replace(what)+".png")
		_ = os.WriteFile(name, png, 0o644)
		tb.check(t)
		t.Fatalf("%s: %s: %v (screenshot %s)\ntoasts shown in this page: %s\nits WebSockets: %s\npage: %.4000s", tb.name, what, err, name, toasts, sockets, html)
	}
	tb.check(t)
}

// shot saves a screenshot of the tab's viewport.
func (tb *tab) shot(t *testing.T, name string) {
	t.Helper()
	var png []byte
	tb.run(t, "screenshot "+name, chromedp.CaptureScreenshot(&png))
	if err := os.WriteFile(filepath.Join(tb.dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// until polls the JS condition js until it holds. A condition that throws (an element
// not drawn yet) counts as not holding: Poll would otherwise fail at the first throw.
func until(js string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var ok bool
		err := chromedp.Poll("(() => { try { return !!("+js+") } catch { return false } })()", &ok, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(45*time.Second)).Do(ctx)
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", js, err)
		}
		return nil
	})
}

func jsString(s string) string {
	return "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`", "$", "\\$").Replace(s) + "`"
}

// hasToast is a JS condition: a toast whose message (its first line) is text.
func hasToast(text string) string {
	return fmt.Sprintf(`[...document.querySelectorAll(".toast")].some((t) => t.firstChild?.textContent === %s)`, jsString(text))
}

// hasToastDetail is a JS condition: a toast with the message text and, as its second
// line, detail.
func hasToastDetail(text, detail string) string {
	return fmt.Sprintf(`[...document.querySelectorAll(".toast")].some((t) => t.firstChild?.textContent === %s && t.querySelector(".toast-detail")?.textContent === %s)`, jsString(text), jsString(detail))
}

// toolsButton is a JS condition: the Tools button is named name and its chip shows
// state ("off", or what is on).
func toolsButton(name, state string) string {
	return fmt.Sprintf(`(() => { const b = document.querySelector("#tools-button"); return b.getAttribute("aria-label") === %s && b.querySelector(".tools-state").textContent === %s && b.classList.contains("on") === %t })()`,
		jsString(name), jsString(state), state != "off")
}

// say types a message and sends it with Enter.
func say(text string) chromedp.Action {
	return chromedp.Tasks{
		chromedp.WaitEnabled("#input", chromedp.ByID),
		until(`document.querySelector("#send").hidden === false`),
		chromedp.SetValue("#input", text, chromedp.ByID),
		chromedp.Focus("#input", chromedp.ByID),
		chromedp.KeyEvent(kb.Enter),
	}
}

// lastCell is a JS expression for the newest code cell of the conversation.
const lastCell = `[...document.querySelectorAll("#messages .cell")].pop()`

// TestBrowserChat drives the product's flows in headless Chromium against a real node
// with the Python sandbox, and fails on any page error.
func TestBrowserChat(t *testing.T) {
	e := newEnv(t)
	m := e.sandboxNode()
	alice, _ := m.user(t, "alice", false)
	base := "http://" + m.Addr()
	dir := screenshotDir(t)
	root := browser(t)
	tab1 := openTab(t, root, "tab 1", dir)
	tab2 := openTab(t, root, "tab 2", dir)

	t.Run("log in", func(t *testing.T) {
		tab1.allow("the server responded with a status of 401")
		var color string
		tab1.run(t, "a wrong token is refused in red",
			chromedp.Navigate(base+"/"),
			chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", "not-a-token", chromedp.ByID),
			chromedp.Click("#login button", chromedp.ByQuery),
			until(`document.querySelector("#login-error").textContent === "Your token was refused; sign in again."`),
			chromedp.Evaluate(`getComputedStyle(document.querySelector("#login-error")).color`, &color),
			chromedp.Evaluate(`document.querySelector("#token").value = ""`, nil),
		)
		if color != "rgb(179, 38, 30)" {
			t.Errorf("the sign-in error is drawn in %s, not the page's red", color)
		}
		tab1.run(t, "sign in with the token",
			chromedp.SendKeys("#token", alice.token, chromedp.ByID),
			chromedp.Click("#login button", chromedp.ByQuery),
			chromedp.WaitVisible("#chat-view", chromedp.ByID),
			until(`document.querySelector("#me").textContent === "alice"`),
		)
		tab1.shot(t, "01-signed-in")
	})

	var agentID int64
	t.Run("create an agent, Show all, switch Python sandbox on, Save", func(t *testing.T) {
		tab1.run(t, "create the agent",
			chromedp.Click("#nav-agents", chromedp.ByID),
			chromedp.WaitVisible("#agent-name-new", chromedp.ByID),
			chromedp.SendKeys("#agent-name-new", "Analyst", chromedp.ByID),
			chromedp.Click("#new-agent button", chromedp.ByQuery),
			chromedp.WaitVisible("#agent-form", chromedp.ByID),
			until(`document.querySelector("#agent-title").textContent === "Analyst"`),
		)
		tab1.run(t, "only featured tools until Show all",
			until(`document.querySelector("#agent-tool-pyodide_sandbox") && !document.querySelector("#agent-tool-swarm_mode")`),
			chromedp.Click("#show-all", chromedp.ByID),
			chromedp.WaitVisible("#agent-tool-swarm_mode", chromedp.ByID),
			until(`document.querySelector("#show-all").textContent === "Show less"`),
		)
		tab1.run(t, "switch the sandbox on and save",
			chromedp.Click("#agent-tool-pyodide_sandbox", chromedp.ByID),
			until(`document.querySelector("#agent-tool-pyodide_sandbox").getAttribute("aria-checked") === "true" && !document.querySelector("#agent-dirty").hidden`),
			chromedp.SetValue("#agent-description", "reads data", chromedp.ByID),
			chromedp.Click("#agent-save", chromedp.ByID),
			until(hasToast("Agent saved")),
			until(`document.querySelector("#agent-dirty").hidden`),
		)
		// Save sits at the top of the configuration page, above TOOLKITS.
		var above bool
		tab1.run(t, "Save is at the top", chromedp.Evaluate(`document.querySelector("#agent-save").getBoundingClientRect().top < document.querySelector("#agent-tools").getBoundingClientRect().top`, &above))
		if !above {
			t.Error("Save is not above the toolkits")
		}
		tab1.shot(t, "02-agent-toolkits")
		var list []agentJSON
		alice.must(200, "GET", "/api/v1/agents", nil, &list)
		if len(list) != 1 || !list[0].InternalTools["pyodide_sandbox"] || list[0].Description != "reads data" {
			t.Fatalf("saved %+v", list)
		}
		agentID = list[0].ID
	})

	var convID int64
	t.Run("new chat with the agent", func(t *testing.T) {
		tab1.run(t, "start it",
			chromedp.Click("#nav-chat", chromedp.ByID),
			chromedp.WaitVisible("#new-conv", chromedp.ByID),
			chromedp.SetValue("#conv-agent", fmt.Sprint(agentID), chromedp.ByID),
			chromedp.Click("#new-conv button", chromedp.ByQuery),
			until(`/^#\/c\/\d+$/.test(location.hash) && !document.querySelector("#tools-button").disabled`),
			until(`document.querySelector("#conv-agent-name").textContent === "with Analyst"`),
			chromedp.Evaluate(`Number(location.hash.split("/")[2])`, &convID),
		)
	})

	t.Run("the popup shows it on from the agent; off toasts in two tabs; a click outside closes it", func(t *testing.T) {
		// The second tab has no conversation open: its toast names the one changed.
		tab2.run(t, "tab 2 is signed in by the kept token", chromedp.Navigate(base+"/"), until(`document.querySelector("#me").textContent === "alice"`), until(socketOpen))
		tab1.run(t, "the button says the sandbox is on before it opens", until(toolsButton("Internal tools: Python sandbox on", "Python")))
		tab1.run(t, "open the popup",
			chromedp.Click("#tools-button", chromedp.ByID),
			chromedp.WaitVisible("#tools-popup", chromedp.ByID),
			until(`document.querySelector("#tools-button").getAttribute("aria-expanded") === "true"`),
			until(`document.querySelector("#tool-pyodide_sandbox").getAttribute("role") === "switch" && document.querySelector("#tool-pyodide_sandbox").getAttribute("aria-checked") === "true"`),
			until(`document.querySelector('[data-tool="pyodide_sandbox"] .source').textContent === "From the agent (on)"`),
		)
		tab1.shot(t, "03-popup-from-agent")
		tab1.run(t, "switch it off",
			chromedp.Click("#tool-pyodide_sandbox", chromedp.ByID),
			until(hasToastDetail("Internal tools configuration updated", "Python sandbox: off")),
			until(`document.querySelector('[data-tool="pyodide_sandbox"] .source').textContent === "Set for this conversation (off)"`),
			until(`!document.querySelector('[data-tool="pyodide_sandbox"] .link').hidden`),
			until(toolsButton("Internal tools: all off", "off")),
		)
		tab2.run(t, "toast in tab 2 names the conversation and the tool", until(hasToastDetail("Internal tools configuration updated (in “New chat”)", "Python sandbox: off")))
		tab1.shot(t, "04-popup-off-toast")
		tab2.shot(t, "05-toast-other-tab")
		if st := alice.tool(convID, "pyodide_sandbox"); st.Enabled || st.Source != "conversation" {
			t.Fatalf("after the click: %+v", st)
		}
		tab1.run(t, "a click outside closes it",
			chromedp.Click("#messages", chromedp.ByID),
			chromedp.WaitNotVisible("#tools-popup", chromedp.ByID),
			until(`document.querySelector("#tools-button").getAttribute("aria-expanded") === "false"`),
		)
		tab1.run(t, "Inherit, then Escape closes it",
			chromedp.Click("#tools-button", chromedp.ByID),
			chromedp.WaitVisible("#tools-popup", chromedp.ByID),
			chromedp.Click(`[data-tool="pyodide_sandbox"] .link`, chromedp.ByQuery),
			until(`document.querySelector('[data-tool="pyodide_sandbox"] .source').textContent === "From the agent (on)"`),
			until(hasToastDetail("Internal tools configuration updated", "Python sandbox: on (from the agent)")),
			chromedp.KeyEvent(kb.Escape),
			chromedp.WaitNotVisible("#tools-popup", chromedp.ByID),
			until(`document.activeElement.id === "tools-button"`),
		)
		if st := alice.tool(convID, "pyodide_sandbox"); !st.Enabled || st.Source != "agent" {
			t.Fatalf("after Inherit: %+v", st)
		}
	})

	t.Run("an agent saved in another tab updates the chat's tools", func(t *testing.T) {
		tab2.run(t, "tab 2 switches the agent's sandbox off and saves",
			chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/agents/%d"`, agentID), nil),
			until(`document.querySelector("#agent-title").textContent === "Analyst" && document.querySelector("#agent-tool-pyodide_sandbox").getAttribute("aria-checked") === "true"`),
			chromedp.Click("#agent-tool-pyodide_sandbox", chromedp.ByID),
			chromedp.Click("#agent-save", chromedp.ByID),
			until(hasToast("Agent saved")),
		)
		tab1.run(t, "tab 1's button and popup follow",
			until(toolsButton("Internal tools: all off", "off")),
			chromedp.Click("#tools-button", chromedp.ByID),
			chromedp.WaitVisible("#tools-popup", chromedp.ByID),
			until(`document.querySelector('[data-tool="pyodide_sandbox"] .source').textContent === "From the agent (off)"`),
			chromedp.KeyEvent(kb.Escape),
			chromedp.WaitNotVisible("#tools-popup", chromedp.ByID),
		)
		tab2.run(t, "tab 2 switches it on again",
			chromedp.Click("#agent-tool-pyodide_sandbox", chromedp.ByID),
			chromedp.Click("#agent-save", chromedp.ByID),
			until(`document.querySelector("#agent-dirty").hidden && document.querySelector("#agent-tool-pyodide_sandbox").getAttribute("aria-checked") === "true"`),
			chromedp.Evaluate(`location.hash = "#/"`, nil),
		)
		tab1.run(t, "and tab 1 follows", until(toolsButton("Internal tools: Python sandbox on", "Python")))
	})

	t.Run("upload a CSV and read it from Python", func(t *testing.T) {
		csv := filepath.Join(t.TempDir(), "sales.csv")
		if err := os.WriteFile(csv, []byte("region,amount\nnorth,10\nsouth,20\neast,30\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		tab1.run(t, "attach it",
			chromedp.SetUploadFiles("#file-input", []string{csv}, chromedp.ByID),
			until(`[...document.querySelectorAll("#attachments .chip-row:not(.uploading)")].some((c) => c.textContent.includes("sales.csv"))`),
		)
		tab1.run(t, "read it",
			say("Sum the amounts, please:\n```python\nimport csv\nrows = list(csv.DictReader(open('/data/sales.csv')))\nprint('total', sum(int(r['amount']) for r in rows))\n```"),
			until(lastCell+`?.dataset.done && `+lastCell+`.querySelector(".cell-out").textContent.includes("total 60")`),
			until(`document.querySelector("#send").hidden === false`),
			until(`document.querySelector("#conv-title").textContent === "Sum the amounts, please:"`),
		)
		tab1.shot(t, "06-csv")

		downloads := t.TempDir()
		tab1.run(t, "its chip downloads it",
			cdpbrowser.SetDownloadBehavior(cdpbrowser.SetDownloadBehaviorBehaviorAllow).WithDownloadPath(downloads),
			chromedp.Click(`#attachments .chip`, chromedp.ByQuery),
		)
		var got []byte
		var err error
		if _, ok := poll(20*time.Second, func() bool {
			got, err = os.ReadFile(filepath.Join(downloads, "sales.csv"))
			return err == nil && string(got) == "region,amount\nnorth,10\nsouth,20\neast,30\n"
		}); !ok {
			t.Fatalf("no download of sales.csv: %q %v", got, err)
		}
	})

	t.Run("a 3-second loop shows streamed lines before it ends", func(t *testing.T) {
		tab1.run(t, "start the loop",
			say("```python\nimport time\nfor i in range(6):\n    print('tick', i, flush=True)\n    time.sleep(0.5)\n```"),
		)
		var snapshot string
		tab1.run(t, "a line shows while the cell still runs",
			until(lastCell+`?.querySelector(".cell-out")?.textContent.includes("tick 1") && !`+lastCell+`.dataset.done`),
			chromedp.Evaluate(lastCell+`.querySelector(".status").textContent`, &snapshot),
		)
		tab1.shot(t, "07-streaming")
		if snapshot != "running…" {
			t.Errorf("status while streaming: %q", snapshot)
		}
		// A reader who scrolls up is left there while lines keep coming, even a line that
		// lands before the scroll's event does (the comment stands for it: the list
		// reacts to any change in it).
		var scrollable bool
		tab1.run(t, "scroll up", chromedp.Evaluate(`(() => { const m = document.querySelector("#messages"); m.scrollTop = 0;
			const c = document.createComment("a line"); m.append(c); queueMicrotask(() => c.remove());
			return m.scrollHeight > m.clientHeight + 100 })()`, &scrollable))
		tab1.run(t, "and it ends with every line",
			until(lastCell+`.dataset.done && `+lastCell+`.querySelector(".cell-out").textContent.includes("tick 5")`),
			until(`document.querySelector("#send").hidden === false`),
		)
		var top float64
		tab1.run(t, "still scrolled up", chromedp.Evaluate(`document.querySelector("#messages").scrollTop`, &top))
		if !scrollable {
			t.Log("the list was too short to scroll; auto-scroll not checked")
		}
		if scrollable && top != 0 {
			t.Errorf("the list scrolled to %v while the reader was reading above", top)
		}
	})

	t.Run("Stop cancels a loop", func(t *testing.T) {
		// The second tab watches: what it draws comes from the events alone.
		tab2.run(t, "tab 2 opens the conversation",
			chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"`, convID), nil),
			until(`document.querySelector("#conv-title").textContent === "Sum the amounts, please:"`),
		)
		tab1.run(t, "start an endless loop and stop it",
			say("```python\nimport time\nwhile True:\n    print('spinning', flush=True)\n    time.sleep(0.3)\n```"),
			until(lastCell+`?.querySelector(".cell-out")?.textContent.includes("spinning")`),
			chromedp.WaitVisible("#stop", chromedp.ByID),
			until(`(() => { const s = document.querySelector("#stop"), r = s.getBoundingClientRect(); return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === s })()`),
			chromedp.Click("#stop", chromedp.ByID),
			until(`[...document.querySelectorAll("#messages .turn-end")].some((e) => e.textContent === "Stopped.")`),
			until(`document.querySelector("#send").hidden === false && document.querySelector("#stop").hidden`),
		)
		tab1.shot(t, "08-stopped")
		// "stopped", or "stopped · state restored" when the code had to be ended with its
		// process (TestBrowserSmallTruths).
		stoppedCell := lastCell + `.querySelector(".status").textContent.startsWith("stopped") && ` + lastCell + `.querySelector(".cell-out").textContent.includes("spinning") && !` + lastCell + `.querySelector(".error-box")`
		tab1.run(t, "its cell reads stopped, with what it printed", until(stoppedCell))
		tab2.run(t, "and so in the tab that watched", until(stoppedCell), chromedp.Evaluate(`location.hash = "#/"`, nil))
		var runs []struct{ Code, Status string }
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", convID), nil, &runs)
		if len(runs) == 0 || !strings.Contains(runs[len(runs)-1].Code, "spinning") || runs[len(runs)-1].Status != "stopped" {
			t.Errorf("the stopped run is not the last recorded, as stopped: %+v", runs)
		}
		tab1.run(t, "the message box has the focus again", until(`document.activeElement.id === "input"`))
		for _, size := range [][2]int64{{1366, 850}, {390, 844}} {
			tab1.run(t, "the stopped cell in view", chromedp.EmulateViewport(size[0], size[1]),
				chromedp.Evaluate(lastCell+`.scrollIntoView({ block: "center" }); true`, nil),
				until(`innerWidth > 720 || document.querySelector("#sidebar").getBoundingClientRect().right <= 0`)) // the menu slid away
			tab1.shot(t, fmt.Sprintf("08-stopped-%d", size[0]))
		}
		tab1.run(t, "back to the window's size", emulation.ClearDeviceMetricsOverride())
	})

	t.Run("an error shows its traceback", func(t *testing.T) {
		tab1.run(t, "divide by zero",
			say("```python\ndef ratio(a, b):\n    return a / b\nratio(1, 0)\n```"),
			until(lastCell+`?.querySelector(".error-box")?.textContent.includes("ZeroDivisionError: division by zero")`),
			until(lastCell+`.querySelector(".traceback").textContent.includes("in ratio")`),
		)
		tab1.shot(t, "09-traceback")
	})

	t.Run("a PNG written by Python shows as an image", func(t *testing.T) {
		tab1.run(t, "write a PNG",
			say("```python\nimport struct, zlib\nw = h = 96\nraw = b''.join(b'\\x00' + bytes(c for x in range(w) for c in (x * 2, y * 2, 200)) for y in range(h))\n"+
				"def chunk(kind, data):\n    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff)\n"+
				"png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')\n"+
				"open('gradient.png', 'wb').write(png)\n```"),
			until(lastCell+`?.querySelector(".thumb img")?.naturalWidth === 96`),
			until(lastCell+`.querySelector(".thumb img").src.startsWith("blob:")`),
		)
		tab1.shot(t, "10-png")
		tab1.run(t, "it opens full size",
			chromedp.Click(`.thumb`, chromedp.ByQuery),
			until(`document.querySelector("#viewer").open && document.querySelector("#viewer-img").naturalWidth === 96`),
		)
		tab1.shot(t, "11-png-full-size")
		tab1.run(t, "Escape closes the viewer", chromedp.KeyEvent(kb.Escape), until(`!document.querySelector("#viewer").open`))
	})

	t.Run("the open conversation is kept across a reload", func(t *testing.T) {
		tab1.run(t, "reload",
			chromedp.Reload(),
			until(`document.querySelector("#conv-title").textContent === "Sum the amounts, please:"`),
			until(`document.querySelectorAll("#messages .cell[data-done]").length === 5`),
			until(`[...document.querySelectorAll("#messages .error-box")].some((e) => e.textContent.includes("ZeroDivisionError"))`),
			// The stopped loop still reads stopped, not timed out, and shows no traceback.
			until(`[...document.querySelectorAll("#messages .cell")].some((c) => c.textContent.includes("spinning") && c.querySelector(".status").textContent.startsWith("stopped") && !c.querySelector(".error-box"))`),
			until(`document.querySelector("#messages .thumb img")?.naturalWidth === 96`),
		)
		tab1.shot(t, "12-reloaded")
	})

	t.Run("a swarm handoff shows nested", func(t *testing.T) {
		tab1.run(t, "create the child",
			chromedp.Click("#nav-agents", chromedp.ByID),
			chromedp.WaitVisible("#agent-name-new", chromedp.ByID),
			chromedp.SendKeys("#agent-name-new", "helper", chromedp.ByID),
			chromedp.Click("#new-agent button", chromedp.ByQuery),
			until(`document.querySelector("#agent-title").textContent === "helper"`),
			chromedp.Click("#agent-tool-pyodide_sandbox", chromedp.ByID),
			chromedp.Click("#agent-save", chromedp.ByID),
			until(`document.querySelector("#agent-dirty").hidden && document.querySelector("#agent-tool-pyodide_sandbox").getAttribute("aria-checked") === "true"`),
		)
		tab1.run(t, "make it the Analyst's child with swarm mode on",
			// Clicked from the page itself: the list is redrawn after the save above, and a
			// node found by the driver may be gone by the time it clicks it.
			until(fmt.Sprintf(`(() => { const e = document.querySelector('[data-agent="%d"]'); e?.click(); return !!e })()`, agentID)),
			until(`document.querySelector("#agent-title").textContent === "Analyst"`),
			// A reloaded page shows the featured tools only again.
			chromedp.Evaluate(`document.querySelector("#show-all").textContent === "Show all" && document.querySelector("#show-all").click()`, nil),
			chromedp.WaitVisible("#agent-tool-swarm_mode", chromedp.ByID),
			chromedp.Click("#agent-tool-swarm_mode", chromedp.ByID),
			chromedp.Click(`#agent-children input`, chromedp.ByQuery),
			chromedp.Click("#agent-save", chromedp.ByID),
			until(`document.querySelector("#agent-dirty").hidden && document.querySelector("#agent-tool-swarm_mode").getAttribute("aria-checked") === "true"`),
		)
		tab1.shot(t, "13-agent-children")
		var a agentJSON
		alice.must(200, "GET", fmt.Sprintf("/api/v1/agents/%d", agentID), nil, &a)
		if !a.InternalTools["swarm_mode"] || len(a.Children) != 1 {
			t.Fatalf("saved %+v", a)
		}
		tab1.run(t, "hand work to the child",
			chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"`, convID), nil),
			until(`document.querySelector("#conv-title").textContent === "Sum the amounts, please:"`),
			say("@helper ```python\nprint('hello from the child')\n```"),
			until(`[...document.querySelectorAll("#messages > .handoff")].some((h) => h.querySelector(".who").textContent === "↳ helper" && h.querySelector(".cell .cell-out")?.textContent.includes("hello from the child") && h.querySelector(".status").textContent === "done")`),
			until(`document.querySelector("#send").hidden === false`),
		)
		tab1.shot(t, "14-swarm")
		tab1.run(t, "nested after a reload too",
			chromedp.Reload(),
			until(`[...document.querySelectorAll("#messages > .handoff")].some((h) => h.querySelector(".who").textContent === "↳ helper" && h.querySelector(".cell .cell-out")?.textContent.includes("hello from the child"))`),
		)
	})

	t.Run("rename and a stale save offers to reload", func(t *testing.T) {
		tab1.run(t, "rename the conversation",
			chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"`, convID), nil),
			until(`document.querySelector("#conv-title").textContent === "Sum the amounts, please:"`),
			chromedp.Click("#rename", chromedp.ByID),
			chromedp.WaitVisible("#rename-input", chromedp.ByID),
			chromedp.SetValue("#rename-input", "Sales check", chromedp.ByID),
			chromedp.Focus("#rename-input", chromedp.ByID),
			chromedp.KeyEvent(kb.Enter),
			until(`document.querySelector("#conv-title").textContent === "Sales check"`),
			until(`[...document.querySelectorAll("#convs .nav-title")].some((e) => e.textContent === "Sales check")`),
		)
		tab1.run(t, "open the agent", chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/agents/%d"`, agentID), nil), until(`document.querySelector("#agent-title").textContent === "Analyst"`))
		var a agentJSON
		alice.must(200, "GET", fmt.Sprintf("/api/v1/agents/%d", agentID), nil, &a)
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/agents/%d", agentID), map[string]any{"version": a.Version, "system_prompt": "changed elsewhere"}, nil)
		tab1.allow("status of 409")
		tab1.run(t, "the stale save is refused with a way out",
			chromedp.SetValue("#agent-description", "my edit", chromedp.ByID),
			chromedp.Click("#agent-save", chromedp.ByID),
			chromedp.WaitVisible("#agent-conflict", chromedp.ByID),
		)
		tab1.shot(t, "15-conflict")
		tab1.run(t, "reload it",
			chromedp.Click("#agent-reload", chromedp.ByID),
			chromedp.WaitNotVisible("#agent-conflict", chromedp.ByID),
			until(`document.querySelector("#agent-prompt").value === "changed elsewhere" && document.querySelector("#agent-description").value === "reads data"`),
		)
	})

	t.Run("keyboard only: open a conversation", func(t *testing.T) {
		// Tab moves only among what is shown: the list is drawn and shown, and the page is
		// signed in, before the first press.
		tab2.run(t, "load the chat", chromedp.Reload(),
			until(`document.querySelector("#me").textContent === "alice" && document.querySelectorAll("#convs a").length === 1 && document.querySelector("#convs a").checkVisibility()`))
		var focus struct {
			At    string // where the press put the focus
			Found bool   // on a conversation link
		}
		var trail []string
		for i := 0; i < 40 && !focus.Found; i++ {
			tab2.run(t, "tab", chromedp.KeyEvent(kb.Tab),
				chromedp.Evaluate(`(() => { const a = document.activeElement; return { At: a ? a.tagName.toLowerCase() + (a.id ? "#" + a.id : "") + (a.className ? "." + String(a.className).split(" ")[0] : "") : "none", Found: !!a?.matches("#convs a") } })()`, &focus))
			trail = append(trail, focus.At)
		}
		if !focus.Found {
			t.Fatalf("Tab never reached the conversation list; the focus went %s", strings.Join(trail, " → "))
		}
		var outline string
		tab2.run(t, "focus is visible", chromedp.Evaluate(`getComputedStyle(document.activeElement).boxShadow`, &outline))
		if outline == "none" || outline == "" {
			t.Errorf("focused link shows no focus ring (box-shadow %q)", outline)
		}
		tab2.shot(t, "16-keyboard-focus")
		tab2.run(t, "Enter opens it",
			chromedp.KeyEvent(kb.Enter),
			until(`document.querySelector("#conv-title").textContent === "Sales check" && document.activeElement.id === "input"`),
			until(`document.querySelectorAll("#messages .cell[data-done]").length >= 5`),
		)
		tab2.run(t, "the popup by keyboard",
			chromedp.Focus("#tools-button", chromedp.ByID),
			chromedp.KeyEvent(kb.Enter),
			until(`document.activeElement.id === "tool-pyodide_sandbox"`),
			chromedp.KeyEvent(kb.Escape),
			until(`document.querySelector("#tools-popup").hidden && document.activeElement.id === "tools-button"`),
		)
	})

	t.Run("usable at 390 px", func(t *testing.T) {
		var hint string
		tab2.run(t, "phone width, touch screen",
			chromedp.EmulateViewport(390, 844, chromedp.EmulateTouch),
			chromedp.Reload(),
			until(`document.querySelectorAll("#messages .cell[data-done]").length >= 5`),
			until(`matchMedia("(pointer: coarse)").matches`),
			chromedp.Evaluate(`document.querySelector("#input").placeholder`, &hint),
		)
		// A touch keyboard's Enter is a new line: Send sends.
		if strings.Contains(hint, "Enter") {
			t.Errorf("on a touch screen the message box says %q", hint)
		}
		var width int
		tab2.run(t, "no sideways scrolling", chromedp.Evaluate(`document.documentElement.scrollWidth`, &width))
		if width > 390 {
			t.Errorf("page is %d px wide at 390", width)
		}
		tab2.shot(t, "17-phone-chat")
		tab2.run(t, "the menu opens the conversations",
			chromedp.Click("#menu", chromedp.ByID),
			until(`document.querySelector("#sidebar").getBoundingClientRect().left >= 0`),
		)
		tab2.shot(t, "18-phone-menu")
		tab2.run(t, "Escape closes the menu and the popup fits",
			chromedp.KeyEvent(kb.Escape),
			until(`document.querySelector("#sidebar").getBoundingClientRect().right <= 0`),
			chromedp.Click("#tools-button", chromedp.ByID),
			chromedp.WaitVisible("#tools-popup", chromedp.ByID),
			until(`(() => { const r = document.querySelector("#tools-popup").getBoundingClientRect(); return r.width > 200 && r.left >= 0 && r.right <= 390 && r.top >= 0 })()`),
		)
		tab2.shot(t, "19-phone-popup")
		tab2.run(t, "the agent page",
			chromedp.KeyEvent(kb.Escape),
			chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/agents/%d"`, agentID), nil),
			until(`document.querySelector("#agent-title").textContent === "Analyst"`),
			chromedp.Evaluate(`document.documentElement.scrollWidth`, &width),
		)
		if width > 390 {
			t.Errorf("agent page is %d px wide at 390", width)
		}
		tab2.shot(t, "20-phone-agent")
	})
}

// hostileDisplays shows an object whose Markdown (HTML in it) tries to run script (a <script>, an
// onerror handler, a javascript: link) and to shadow the page's #input, then a 40×24
// PNG built without packages; the sleep keeps the cell running while the items show.
var hostileDisplays = sandboxtest.RichDisplay + `
import time
class Hostile:
    # Markdown is drawn in the page, through the sanitizer (HTML with scripts gets a frame).
    def _repr_markdown_(self):
        return ('<p id="input">Report: <b>bold</b></p>'
                '<script>window.pwned = "script"; document.title = "pwned"</script>'
                '<img src="x" onerror="window.pwned = \'onerror\'; document.title = \'pwned\'">'
                '<a href="javascript:window.pwned = \'link\'">link</a>')
    def __repr__(self):
        return "Hostile()"
class Wide:
    def _repr_png_(self):
        return make_png(40, 24)
print("before")
display(Hostile())
display(Wide())
time.sleep(1.5)
print("after")`

// displaysReport is what the page shows of hostileDisplays' cell, and what got through.
type displaysReport struct {
	Items    int    `json:"items"`
	Images   int    `json:"images"`
	Bold     string `json:"bold"`
	Pwned    string `json:"pwned"`
	Title    string `json:"title"`
	Scripts  int    `json:"scripts"`
	Handlers int    `json:"handlers"`
	ImgSrc   string `json:"imgSrc"`
	Href     string `json:"href"`
	Input    string `json:"input"`
	PNGWidth int    `json:"pngWidth"`
	PNGAttrW string `json:"pngAttrW"`
	PNGSrc   string `json:"pngSrc"`
}

const displaysReportJS = `(() => {
  const cell = [...document.querySelectorAll("#messages .cell")].find((c) => c.textContent.includes("class Hostile"));
  const box = cell.querySelector(".cell-stream");
  const png = box.querySelector("img.display-image");
  return {
    images: cell.querySelectorAll("img.display-image, .thumbs img").length,
    items: box.querySelectorAll(":scope > .display").length,
    bold: box.querySelector(".display-html b")?.textContent ?? "",
    pwned: String(window.pwned), title: document.title,
    scripts: box.querySelectorAll("script").length,
    handlers: [...box.querySelectorAll("*")].filter((e) => [...e.attributes].some((a) => a.name.startsWith("on"))).length,
    imgSrc: box.querySelector(".display-html img")?.getAttribute("src") ?? "(none)",
    href: box.querySelector(".display-html a")?.getAttribute("href") ?? "(none)",
    input: document.getElementById("input").tagName,
    pngWidth: png?.naturalWidth ?? 0, pngAttrW: png?.getAttribute("width") ?? "", pngSrc: png?.src ?? "",
  };
})()`

func (r displaysReport) check(t *testing.T) {
	t.Helper()
	if r.Items != 2 || r.Bold != "bold" || r.Images != 1 {
		t.Errorf("items %d, bold %q, %d images in the cell (want the displayed PNG once)", r.Items, r.Bold, r.Images)
	}
	if r.Pwned != "undefined" || r.Title == "pwned" || r.Scripts != 0 || r.Handlers != 0 {
		t.Errorf("script got through: pwned %s, title %q, %d scripts, %d handlers", r.Pwned, r.Title, r.Scripts, r.Handlers)
	}
	if r.ImgSrc != "(none)" || r.Href != "(none)" {
		t.Errorf("the item's <img src> %q and <a href> %q should be gone", r.ImgSrc, r.Href)
	}
	if r.Input != "TEXTAREA" {
		t.Errorf(`the item's id="input" shadows the composer: #input is a %s`, r.Input)
	}
	if r.PNGWidth != 40 || r.PNGAttrW != "40" || !strings.HasPrefix(r.PNGSrc, "blob:") {
		t.Errorf("png: natural width %d, width attribute %q, src %q", r.PNGWidth, r.PNGAttrW, r.PNGSrc)
	}
}

// cellDone is a JS condition: hostileDisplays' cell finished with both items drawn,
// the image loaded.
const hostileCellDone = `(() => {
  const c = [...document.querySelectorAll("#messages .cell")].find((c) => c.textContent.includes("class Hostile"));
  return !!c?.dataset.done && c.querySelector(".cell-stream").textContent.includes("after") &&
    c.querySelector(".cell-stream img.display-image")?.naturalWidth === 40;
})()`

// TestBrowserDisplays: what Python displays shows in the page, sanitized, live and from
// history; the Files panel lists, uploads, refuses with the server's reason, deletes;
// a viewer gets neither upload nor delete.
func TestBrowserDisplays(t *testing.T) {
	e := newEnv(t)
	m := e.sandboxNode()
	alice, _ := m.user(t, "alice", false)
	bob, bobID := m.user(t, "bob", false)
	agent := alice.createAgent(map[string]any{"name": "Analyst", "model": "builtin", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": bobID, "role": "viewer"}, nil)
	base := "http://" + m.Addr()
	dir := screenshotDir(t)
	tb := openTab(t, browser(t), "tab", dir)
	signIn := func(t *testing.T, c *client) {
		tb.run(t, "sign in",
			chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
			chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", c.token, chromedp.ByID),
			chromedp.Click("#login button", chromedp.ByQuery),
			until(`document.querySelector("#conv-title").textContent === "test" && !document.querySelector("#files-button").disabled`),
		)
	}

	// Chromium reports each on* attribute of the hostile HTML as a CSP violation while
	// DOMPurify parses it (in an inert document sharing the page's policy): the handler
	// is blocked there and removed before anything reaches the page, which the checks
	// below verify. Only reports raised inside DOMPurify are expected.
	tb.allow("The action has been blocked. " + base + "/vendor/dompurify-")
	t.Run("display items show live, sanitized", func(t *testing.T) {
		signIn(t, alice)
		tb.run(t, "run the cell; its items show while it runs",
			say("Show them:\n"+py(hostileDisplays)),
			until(lastCell+`?.querySelector(".cell-stream .display-html b") && `+lastCell+`.querySelector(".display-pending") && !`+lastCell+`.dataset.done`),
		)
		tb.shot(t, "01-displays-running")
		var r displaysReport
		tb.run(t, "and stay, once each, with the image from its file",
			until(hostileCellDone),
			until(`document.querySelector("#send").hidden === false`),
			chromedp.Evaluate(displaysReportJS, &r),
		)
		r.check(t)
		tb.shot(t, "02-displays-done")
	})

	t.Run("display items show once after a reload", func(t *testing.T) {
		var runs []map[string]json.RawMessage
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), nil, &runs)
		if len(runs) != 1 {
			t.Fatalf("%d runs", len(runs))
		}
		if _, ok := runs[0]["displays"]; !ok {
			t.Fatal("the stored run does not carry its display items (GET …/sandbox/executions lacks displays)")
		}
		var r displaysReport
		tb.run(t, "reload",
			chromedp.Reload(),
			until(hostileCellDone),
			chromedp.Evaluate(displaysReportJS, &r),
		)
		r.check(t)
	})

	notes := filepath.Join(t.TempDir(), "notes.txt")
	big := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(notes, []byte("remember the milk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, bytes.Repeat([]byte{'x'}, 11<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("the Files panel uploads, refuses with the reason, deletes", func(t *testing.T) {
		tb.run(t, "open it: the displayed image is a file of the conversation",
			chromedp.Click("#files-button", chromedp.ByID),
			chromedp.WaitVisible("#files-panel", chromedp.ByID),
			until(`document.querySelector("#files-button").getAttribute("aria-expanded") === "true"`),
			until(`[...document.querySelectorAll("#files-list .file-name")].some((b) => b.textContent.endsWith(".png"))`),
		)
		tb.run(t, "upload a file",
			chromedp.SetUploadFiles("#files-input", []string{notes}, chromedp.ByID),
			until(`[...document.querySelectorAll("#files-list .file")].some((f) => f.textContent.includes("notes.txt") && f.textContent.includes("upload"))`),
			until(`[...document.querySelectorAll("#attachments .chip")].some((c) => c.textContent.includes("notes.txt"))`),
		)
		tb.allow("status of 413")
		tb.run(t, "a file over the limit is refused with the server's reason",
			chromedp.SetUploadFiles("#files-input", []string{big}, chromedp.ByID),
			until(`/^big\.bin is 11 MiB; uploads are limited to \d+ MiB/.test(document.querySelector("#files-error").textContent)`),
		)
		tb.shot(t, "03-files-panel")
		files := alice.files(conv)
		if _, ok := files["big.bin"]; ok {
			t.Errorf("the refused file is stored: %+v", files)
		}
		notesID := files["notes.txt"].ID
		if notesID == 0 {
			t.Fatalf("notes.txt not stored: %+v", files)
		}
		tb.run(t, "delete it",
			chromedp.Click(fmt.Sprintf(`#files-list [data-file="%d"] .danger`, notesID), chromedp.ByQuery),
			until(`![...document.querySelectorAll("#files-list .file")].some((f) => f.textContent.includes("notes.txt"))`),
			until(`![...document.querySelectorAll("#attachments .chip")].some((c) => c.textContent.includes("notes.txt"))`),
		)
		if resp, _ := alice.rawDo("GET", fmt.Sprintf("/api/v1/files/%d", notesID), nil); resp.StatusCode != 404 {
			t.Errorf("deleted file: %d", resp.StatusCode)
		}
		tb.run(t, "Escape closes the panel",
			chromedp.KeyEvent(kb.Escape),
			chromedp.WaitNotVisible("#files-panel", chromedp.ByID),
			until(`document.activeElement.id === "files-button"`),
		)
	})

	t.Run("a viewer sees the items and the files, without upload or delete", func(t *testing.T) {
		tb.run(t, "sign out", chromedp.Click("#logout", chromedp.ByID), chromedp.WaitVisible("#token", chromedp.ByID))
		signIn(t, bob)
		tb.run(t, "open the files",
			chromedp.Click("#files-button", chromedp.ByID),
			chromedp.WaitVisible("#files-panel", chromedp.ByID),
			until(`document.querySelectorAll("#files-list .file").length >= 1`),
		)
		var controls int
		var uploadHidden bool
		tb.run(t, "no controls to change them",
			chromedp.Evaluate(`document.querySelectorAll("#files-list .danger, #attachments .chip-remove").length`, &controls),
			chromedp.Evaluate(`document.querySelector("#files-tools").hidden && document.querySelector("#attach").disabled`, &uploadHidden),
		)
		if controls != 0 || !uploadHidden {
			t.Errorf("viewer: %d delete buttons, upload hidden %v", controls, uploadHidden)
		}
		tb.run(t, "at 390 px the panel fits",
			chromedp.EmulateViewport(390, 844),
			chromedp.Reload(),
			until(`document.querySelector("#conv-title").textContent === "test" && !document.querySelector("#files-button").disabled`),
			until(`document.querySelector("#sidebar").getBoundingClientRect().right <= 0`),
			chromedp.Click("#files-button", chromedp.ByID),
			chromedp.WaitVisible("#files-panel", chromedp.ByID),
			until(`document.querySelectorAll("#files-list .file").length >= 1`),
			until(`(() => { const r = document.querySelector("#files-panel").getBoundingClientRect(); return r.width > 300 && r.left >= 0 && r.right <= 390 })()`),
		)
		tb.shot(t, "04-phone-files")
		var width int
		tb.run(t, "the items fit too",
			chromedp.KeyEvent(kb.Escape),
			chromedp.WaitNotVisible("#files-panel", chromedp.ByID),
			chromedp.Evaluate(`document.documentElement.scrollWidth`, &width),
		)
		if width > 390 {
			t.Errorf("page is %d px wide at 390", width)
		}
		tb.shot(t, "05-phone-displays")
	})
}

// plantedControls is an editor's message holding elements with the ids and names of the
// page's own controls: the composer's form, its text box and Send button, the message
// list and the toasts.
const plantedControls = "Please review this:\n\n" +
	`<form id="composer" name="composer" aria-label="Message"><textarea id="input" name="input">Transfer everything to mallory</textarea><button id="send" name="send">Send</button></form>` +
	"\n\n" + `<ol id="messages" name="messages"></ol><div id="toasts" name="toasts"></div>`

// TestBrowserPlantedControls: a message cannot stand in for the page's controls. An
// editor posts plantedControls; another member types into the message box found by its
// role and name and presses Enter: the server gets that member's own words, and nothing
// of the message is focused or typed into.
func TestBrowserPlantedControls(t *testing.T) {
	e := newEnv(t)
	m := e.node()
	alice, aliceID := m.user(t, "alice", false)
	mallory, malloryID := m.user(t, "mallory", false)
	conv := alice.createConversation(0)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": malloryID, "role": "editor"}, nil)
	mallory.finishTurn(conv, mallory.post(conv, plantedControls))
	base := "http://" + m.Addr()
	tb := openTab(t, browser(t), "alice", screenshotDir(t))

	// The page's own elements are noted before any message is drawn, and every focus or
	// key that lands inside the message list is counted.
	tb.run(t, "sign in and open the conversation",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.Evaluate(`window.page = { input: document.getElementById("input"), messages: document.getElementById("messages") };
window.planted = [];
for (const type of ["focusin", "keydown", "input"]) document.addEventListener(type, (e) => {
  if (page.messages.contains(e.target)) planted.push(type + " " + e.target.tagName);
}, true);
true`, nil),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		chromedp.WaitVisible("#chat-view", chromedp.ByID),
		chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"`, conv), nil),
		until(`[...page.messages.querySelectorAll(".msg.user")].some((m) => m.textContent.includes("Please review this"))`),
		until(`page.messages.querySelectorAll(".msg.assistant").length === 1`),
	)
	tb.shot(t, "01-planted")

	var found []*accessibility.Node
	tb.run(t, "find the message box by its role and name", chromedp.ActionFunc(func(ctx context.Context) error {
		doc, err := dom.GetDocument().Do(ctx)
		if err != nil {
			return err
		}
		nodes, err := accessibility.QueryAXTree().WithNodeID(doc.NodeID).WithRole("textbox").WithAccessibleName("Message").Do(ctx)
		for _, n := range nodes {
			if !n.Ignored {
				found = append(found, n)
			}
		}
		return err
	}))
	if len(found) != 1 {
		t.Fatalf("%d text boxes named Message, want the page's one", len(found))
	}
	var isComposer bool
	tb.run(t, "focus it",
		dom.Focus().WithBackendNodeID(found[0].BackendDOMNodeID),
		chromedp.Evaluate(`document.activeElement === page.input && !page.input.disabled`, &isComposer),
	)
	if !isComposer {
		t.Fatal("the text box named Message is not the page's message box, or it is disabled")
	}
	tb.run(t, "send",
		chromedp.KeyEvent("Hello from alice"),
		chromedp.KeyEvent(kb.Enter),
		until(`page.input.value === "" && page.messages.querySelectorAll(".msg.user").length === 2`),
		until(`page.messages.querySelectorAll(".msg.assistant").length === 2`), // its turn ended
	)
	tb.shot(t, "02-sent")

	sentBy := func(id int64) []string {
		var msgs []struct {
			Role    string
			UserID  int64 `json:"user_id"`
			Content string
		}
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/messages", conv), nil, &msgs)
		var sent []string
		for _, msg := range msgs {
			if msg.Role == "user" && msg.UserID == id {
				sent = append(sent, msg.Content)
			}
		}
		return sent
	}
	if sent := sentBy(aliceID); len(sent) != 1 || sent[0] != "Hello from alice" {
		t.Errorf("alice sent %q, want only her own words", sent)
	}
	var report struct {
		Planted  []string `json:"planted"`
		Controls int      `json:"controls"`
		IDs      []string `json:"ids"`
	}
	tb.run(t, "nothing of the message took focus or keys",
		chromedp.Evaluate(`({
  planted: window.planted,
  controls: page.messages.querySelectorAll(".md :is(form, textarea, input, button, select):not(.code-wrap > button.copy)").length,
  ids: [...page.messages.querySelectorAll(".msg [id], .msg [name]")].flatMap((e) => [e.id, e.getAttribute("name")].filter(Boolean)),
})`, &report),
	)
	if len(report.Planted) != 0 || report.Controls != 0 {
		t.Errorf("the message's controls: %d drawn, focus and keys they got: %q", report.Controls, report.Planted)
	}
	for _, id := range report.IDs {
		if !strings.HasPrefix(id, "user-content-") {
			t.Errorf("a message element keeps the id or name %q", id)
		}
	}

	// Were an id ever to get past the sanitizer, the page would still use its own box.
	var kept [2]string
	tb.run(t, "a box planted past the sanitizer is not the one read",
		chromedp.Evaluate(`window.bypass = page.messages.appendChild(Object.assign(document.createElement("textarea"), { id: "input", value: "Transfer everything to mallory" }));
page.input.focus(); true`, nil),
		chromedp.KeyEvent("Hello again"),
		chromedp.KeyEvent(kb.Enter),
		// The message shows (over the socket) before the POST's answer, after which the
		// box is cleared: wait for both.
		until(`page.messages.querySelectorAll(".msg.user").length === 3 && page.input.value === ""`),
		chromedp.Evaluate(`[page.input.value, bypass.value]`, &kept),
	)
	if sent := sentBy(aliceID); len(sent) != 2 || sent[1] != "Hello again" || kept != [2]string{"", "Transfer everything to mallory"} {
		t.Errorf("alice sent %q; the message box and the planted one hold %q", sent, kept)
	}
}

// heldSocket holds back the page's WebSocket until window.release() is called: when
// localStorage "hold" is "open", its opening (the page works over REST meanwhile, as
// with a socket slow to connect); when it is "frames", the frames the page sends (as
// with a server slow to take a subscription).
const heldSocket = `(() => {
  const Real = window.WebSocket;
  let release;
  const gate = new Promise((resolve) => { release = resolve; });
  window.release = release;
  function Held(url) {
    const hold = localStorage.getItem("hold");
    let real = null, closed = false;
    const held = {
      readyState: Real.CONNECTING,
      send: (data) => hold === "frames" ? gate.then(() => real.send(data)) : real.send(data),
      close: (code) => { closed = true; real?.close(code); },
    };
    const open = () => {
      if (closed) return;
      real = new Real(url);
      real.onopen = (e) => { held.readyState = Real.OPEN; held.onopen?.(e); };
      real.onmessage = (e) => held.onmessage?.(e);
      real.onclose = (e) => { held.readyState = Real.CLOSED; held.onclose?.(e); };
    };
    if (hold === "open") gate.then(open); else open();
    return held;
  }
  Object.assign(Held, { CONNECTING: Real.CONNECTING, OPEN: Real.OPEN, CLOSING: Real.CLOSING, CLOSED: Real.CLOSED });
  window.WebSocket = Held;
})()`

// TestBrowserLateSocket: the events of a turn that ran while the page's subscription was
// not yet in place are not lost. The user sends a message while the socket is held back
// and the turn ends meanwhile: once it is released, the page shows the answer and no
// longer a running turn.
func TestBrowserLateSocket(t *testing.T) {
	e := newEnv(t)
	m := e.node()
	alice, _ := m.user(t, "alice", false)
	for _, hold := range []string{"open", "frames"} {
		t.Run("held "+hold, func(t *testing.T) {
			conv := alice.createConversation(0)
			tb := openTab(t, browser(t), "alice", screenshotDir(t))
			tb.run(t, "sign in with the socket held",
				chromedp.ActionFunc(func(ctx context.Context) error {
					_, err := page.AddScriptToEvaluateOnNewDocument(heldSocket).Do(ctx)
					return err
				}),
				chromedp.Navigate(fmt.Sprintf("http://%s/#/c/%d", m.Addr(), conv)),
				chromedp.WaitVisible("#token", chromedp.ByID),
				chromedp.Evaluate(fmt.Sprintf(`localStorage.setItem("hold", %q)`, hold), nil),
				chromedp.SendKeys("#token", alice.token, chromedp.ByID),
				chromedp.Click("#login button", chromedp.ByQuery),
				until(`document.querySelector("#conv-title").textContent === "test"`),
				say("Hello"),
				until(`document.querySelector("#messages .msg.user")?.textContent.includes("Hello")`),
			)
			eventually(t, 30*time.Second, "the answer to be stored", func() bool {
				msgs := alice.messages(conv)
				return len(msgs) == 2 && msgs[1].Role == "assistant"
			})
			tb.run(t, "release it: the answer shows and the turn is over",
				chromedp.Evaluate(`release(); true`, nil),
				until(`document.querySelectorAll("#messages .msg.assistant").length === 1`),
				until(`!document.querySelector("#send").hidden && document.querySelector("#stop").hidden`),
			)
			tb.shot(t, "01-released")
		})
	}
	// A send that races the page's load draws the picture again (the newest load wins);
	// when the turn is still running then, the picture is drawn from the turn's events,
	// replayed by a new subscription. The message that started the turn stays on the
	// page while that subscription is slow: here it is held for longer than the turn.
	t.Run("a load while a slow subscription replays the turn", func(t *testing.T) {
		m := e.sandboxNode()
		conv := alice.createConversation(0)
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": true}, nil)
		tb := openTab(t, browser(t), "alice", screenshotDir(t))
		tb.run(t, "sign in with the socket's frames held, send a cell that runs for a while",
			chromedp.ActionFunc(func(ctx context.Context) error {
				_, err := page.AddScriptToEvaluateOnNewDocument(heldSocket).Do(ctx)
				return err
			}),
			chromedp.Navigate(fmt.Sprintf("http://%s/#/", m.Addr())),
			chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.Evaluate(`localStorage.setItem("hold", "frames")`, nil),
			chromedp.SendKeys("#token", alice.token, chromedp.ByID),
			chromedp.Click("#login button", chromedp.ByQuery),
			// The socket is open before the conversation is: its subscription goes out
			// (and is held), so the conversation's picture waits for the server's answer.
			chromedp.Sleep(time.Second),
			chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"; true`, conv), nil),
			until(`document.querySelector("#conv-title").textContent === "test"`),
			say("Slow one\n```python\nimport time\ntime.sleep(6)\n```"),
			until(`document.querySelector("#messages .msg.user")?.textContent.includes("Slow one")`),
		)
		// The load the send started has drawn the running turn by now (it takes
		// milliseconds); the subscription that replays the turn is still held.
		var shown bool
		tb.run(t, "the message stays while the turn runs",
			chromedp.Sleep(3*time.Second),
			chromedp.Evaluate(`!!document.querySelector("#messages .msg.user")?.textContent.includes("Slow one") && document.querySelector("#chat").getAttribute("aria-busy") === "true"`, &shown),
		)
		if !shown {
			tb.shot(t, "02-message-gone")
			t.Fatal("the message that started the running turn left the page while its replay was held")
		}
		tb.run(t, "release it: the answer shows once, after the message",
			chromedp.Evaluate(`release(); true`, nil),
			until(`document.querySelectorAll("#messages .msg.assistant").length === 1 && document.querySelectorAll("#messages .msg.user").length === 1`),
			until(`!document.querySelector("#send").hidden`),
		)
		tb.shot(t, "02-released")
	})
}
