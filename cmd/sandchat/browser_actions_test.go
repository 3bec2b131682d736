package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/accessibility"
	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

// controls finds the page's controls of role and accessible name, as assistive
// technology sees them (hidden ones are not there), within the element that selector
// finds (the whole page when it is empty).
func controls(role, name, selector string, found *[]cdp.BackendNodeID) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		*found = nil
		// The document is named by a JS reference: DOM.getDocument would renumber the
		// nodes chromedp tracks, and its selector actions would wait forever.
		doc, _, err := runtime.Evaluate("document").Do(ctx)
		if err != nil {
			return err
		}
		nodes, err := accessibility.QueryAXTree().WithObjectID(doc.ObjectID).WithRole(role).WithAccessibleName(name).Do(ctx)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Ignored {
				continue
			}
			if selector != "" {
				obj, err := dom.ResolveNode().WithBackendNodeID(n.BackendDOMNodeID).Do(ctx)
				if err != nil {
					return err
				}
				arg, _ := json.Marshal(selector)
				res, _, err := runtime.CallFunctionOn(`function (s) { return !!this.closest(s) }`).WithObjectID(obj.ObjectID).
					WithArguments([]*runtime.CallArgument{{Value: arg}}).WithReturnByValue(true).Do(ctx)
				if err != nil {
					return err
				}
				if string(res.Value) != "true" {
					continue
				}
			}
			*found = append(*found, n.BackendDOMNodeID)
		}
		return nil
	})
}

// press clicks, with the mouse, the one control of role and name within selector. The
// browser updates its accessibility tree after the DOM, later on a busy machine: a
// control just drawn is waited for (a few seconds) before it counts as missing. The
// click goes where the control is once the page holds still under the pointer: a
// control that moved (the list followed new output) is aimed at again, not missed.
func press(role, name, selector string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var found []cdp.BackendNodeID
		var x, y float64
		var err error
		aimed := false
		poll(5*time.Second, func() bool {
			if err = controls(role, name, selector, &found).Do(ctx); err != nil || len(found) != 1 {
				return err != nil && !redrawn(&err)
			}
			aimed, err = aim(ctx, found[0], &x, &y)
			return (err != nil && !redrawn(&err)) || aimed
		})
		if err != nil {
			return err
		}
		if len(found) != 1 {
			return fmt.Errorf("%d %ss named %q in %q, want one", len(found), role, name, selector)
		}
		if !aimed {
			return fmt.Errorf("the %s named %q in %q stays covered or keeps moving", role, name, selector)
		}
		return chromedp.MouseClickXY(x, y).Do(ctx)
	})
}

// redrawn tells whether *err is the browser's answer about a node the page removed after
// it was found (it redraws a list when an event comes), and then clears it: the caller
// looks for the control again.
func redrawn(err *error) bool {
	var ce *cdproto.Error
	if !errors.As(*err, &ce) || !strings.Contains(ce.Message, "Node is detached from document") && !strings.Contains(ce.Message, "No node with given id found") {
		return false
	}
	*err = nil
	return true
}

// aim scrolls node into view and sets x, y to its middle if the page shows the node
// there, and still does a moment later.
func aim(ctx context.Context, node cdp.BackendNodeID, x, y *float64) (bool, error) {
	if err := dom.ScrollIntoViewIfNeeded().WithBackendNodeID(node).Do(ctx); err != nil {
		return false, err
	}
	obj, err := dom.ResolveNode().WithBackendNodeID(node).Do(ctx)
	if err != nil {
		return false, err
	}
	var at []float64
	for range 2 {
		box, err := dom.GetBoxModel().WithBackendNodeID(node).Do(ctx)
		if err != nil {
			return false, err
		}
		q := box.Border
		*x, *y = (q[0]+q[4])/2, (q[1]+q[5])/2
		if at != nil && (at[0] != *x || at[1] != *y) {
			return false, nil
		}
		at = []float64{*x, *y}
		args, _ := json.Marshal([]float64{*x, *y})
		res, _, err := runtime.CallFunctionOn(`function (at) { return new Promise((ok) => requestAnimationFrame(() => {
			const e = document.elementFromPoint(at[0], at[1]);
			ok(!!e && (e === this || this.contains(e) || !!e.closest("label")?.contains(this) || [...(this.labels || [])].some((l) => l.contains(e))));
		})) }`).WithObjectID(obj.ObjectID).WithArguments([]*runtime.CallArgument{{Value: args}}).
			WithAwaitPromise(true).WithReturnByValue(true).Do(ctx)
		if err != nil || string(res.Value) != "true" {
			return false, err
		}
	}
	return true, nil
}

// awaitPromise lets Evaluate wait for the promise its expression returns.
func awaitPromise(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }

// atEnd is a JS condition: the message list shows its end.
const atEnd = `(() => { const m = document.querySelector("#messages"); return m.scrollHeight - m.scrollTop - m.clientHeight < 2 })()`

// TestBrowserCellActions: the list follows new output, images included, until the reader
// scrolls up, then offers "Jump to latest"; a cell past 16 KiB of output shows all of it
// on demand; code and output copy to the clipboard; toasts stay off the controls.
func TestBrowserCellActions(t *testing.T) {
	e := newEnv(t)
	m := e.sandboxNode()
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Analyst", "model": "builtin", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	base := "http://" + m.Addr()
	tb := openTab(t, browser(t), "alice", screenshotDir(t))
	tb.run(t, "sign in",
		chromedp.EmulateViewport(1366, 850),
		cdpbrowser.GrantPermissions([]cdpbrowser.PermissionType{cdpbrowser.PermissionTypeClipboardReadWrite, cdpbrowser.PermissionTypeClipboardSanitizedWrite}).WithOrigin(base),
		chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(`document.querySelector("#conv-title").textContent === "test" && !document.querySelector("#input").disabled`),
	)

	t.Run("the list follows images that load after the reply", func(t *testing.T) {
		code := sandboxtest.RichDisplay + `
import time
for i in range(3):
    print('row', i)
open('first.png', 'wb').write(make_png(300, 220))
open('second.png', 'wb').write(make_png(300, 220))
class Big:
    def _repr_png_(self):
        return make_png(640, 420)
display(Big())
time.sleep(1)
print('end of output')`
		var report struct {
			Gap       float64 `json:"gap"`
			ReplyLow  float64 `json:"replyLow"`
			ListLow   float64 `json:"listLow"`
			Following bool    `json:"jumpHidden"`
		}
		// Images arrive well after the reply, as over a slow network: the list must follow
		// the height they bring after everything else was drawn.
		chromedp.ListenTarget(tb.ctx, func(ev any) {
			if e, ok := ev.(*fetch.EventRequestPaused); ok {
				go func() {
					time.Sleep(1500 * time.Millisecond)
					c := chromedp.FromContext(tb.ctx)
					_ = fetch.ContinueRequest(e.RequestID).Do(cdp.WithExecutor(tb.ctx, c.Target))
				}()
			}
		})
		tb.run(t, "hold the images back", fetch.Enable().WithPatterns([]*fetch.RequestPattern{{URLPattern: "*/api/v1/files/*"}}))
		defer tb.run(t, "let them go", fetch.Disable())
		tb.run(t, "run it and let the reply come",
			say("```python\n"+code+"\n```"),
			until(lastCell+`?.dataset.done && `+lastCell+`.querySelectorAll(".thumb img").length === 2 && [...`+lastCell+`.querySelectorAll("img")].every((i) => i.complete && i.naturalWidth > 0)`),
			until(`[...document.querySelectorAll("#messages > .msg.assistant")].pop()?.textContent.includes("end of output") && !document.querySelector("#send").hidden`),
			chromedp.Sleep(300), // what the images' loads moved has settled
			chromedp.Evaluate(`(() => { const m = document.querySelector("#messages"), r = [...m.querySelectorAll(":scope > .msg.assistant")].pop();
  return { gap: m.scrollHeight - m.scrollTop - m.clientHeight, replyLow: r.getBoundingClientRect().bottom, listLow: m.getBoundingClientRect().bottom,
    jumpHidden: !document.querySelector(".jump-latest") || document.querySelector(".jump-latest").hidden } })()`, &report),
		)
		tb.shot(t, "01-followed-images")
		if report.Gap >= 2 || report.ReplyLow > report.ListLow+1 || !report.Following {
			t.Errorf("after images the list is %v px from its end, the reply ends at %v below the list's %v (jump button hidden: %v)", report.Gap, report.ReplyLow, report.ListLow, report.Following)
		}
	})

	t.Run("scrolling up stops following and offers Jump to latest", func(t *testing.T) {
		const tag = "follow"
		lines := linesOf(tag)
		var found []cdp.BackendNodeID
		tb.run(t, "start lines coming", say(tickingCell(tag, 14)), until(fmt.Sprintf(`%s.length >= 2`, lines)))
		tb.run(t, "no button while at the end", controls("button", "Jump to latest", "", &found))
		if len(found) != 0 {
			t.Fatalf("%d Jump to latest buttons while following", len(found))
		}
		tb.run(t, "the reader scrolls up with the keyboard",
			chromedp.Focus("#messages", chromedp.ByID),
			chromedp.KeyEvent(kb.PageUp),
			until(`document.querySelector(".jump-latest") && !document.querySelector(".jump-latest").hidden`),
			controls("button", "Jump to latest", "", &found),
		)
		if len(found) != 1 {
			t.Fatalf("%d Jump to latest buttons after scrolling up, want one", len(found))
		}
		var top, later float64
		var n int
		tb.run(t, "lines keep coming and the list stays put",
			// The keyboard's scroll is smooth: it has ended when two looks agree.
			until(`(() => { const t = document.querySelector("#messages").scrollTop, same = window.lastTop === t; window.lastTop = t; return same })()`),
			chromedp.Evaluate(`document.querySelector("#messages").scrollTop`, &top),
			chromedp.Evaluate(lines+`.length`, &n),
			until(fmt.Sprintf(`%s.length >= %d`, lines, n+2)),
			chromedp.Evaluate(`document.querySelector("#messages").scrollTop`, &later),
		)
		tb.shot(t, "02-jump-to-latest")
		if later != top {
			t.Errorf("the list moved from %v to %v while the reader was reading above", top, later)
		}
		tb.run(t, "the button goes to the end, and the list follows again",
			press("button", "Jump to latest", ""),
			until(atEnd),
			until(`document.querySelector(".jump-latest").hidden`),
			chromedp.Evaluate(lines+`.length`, &n),
			until(fmt.Sprintf(`%s.length >= %d`, lines, n+2)),
			until(atEnd),
			until(fmt.Sprintf(`%s.dataset.done && !document.querySelector("#send").hidden`, cellOf(tag))),
			chromedp.Sleep(200),
			until(atEnd),
		)
	})

	t.Run("past 16 KiB of output, Show all draws the whole run", func(t *testing.T) {
		const marker = "the very last line"
		code := "```python\nfor i in range(500):\n    print(f'{i:04d} ' + 'x' * 95)\nprint('" + marker + "')\n```"
		full := 500*101 + len(marker) + 1
		var shown int
		cell := `[...document.querySelectorAll("#messages .cell")].find((c) => c.textContent.includes("range(500)"))`
		tb.run(t, "run it",
			say(code),
			until(cell+`?.dataset.done && !document.querySelector("#send").hidden`),
			chromedp.Evaluate(cell+`.setAttribute("data-test", "big"); `+cell+`.querySelector(".cell-out").textContent.length`, &shown),
		)
		if shown > 17<<10 || shown < 16<<10 {
			t.Errorf("the cell shows %d characters of %d, want the first 16 KiB", shown, full)
		}
		tb.shot(t, "03-show-all-offered")
		var text string
		// What the page did with the press, said if it does not show all: the clicks it
		// saw, the toasts it showed, and the cell as it is.
		tb.run(t, "watch the press", chromedp.Evaluate(`window.seen = { clicks: [], toasts: [] };
			document.addEventListener("click", (e) => seen.clicks.push(e.target.outerHTML.slice(0, 120)), true);
			new MutationObserver(() => document.querySelectorAll(".toast").forEach((t) => seen.toasts.includes(t.textContent) || seen.toasts.push(t.textContent)))
				.observe(document.querySelector("#toasts"), { childList: true, subtree: true }); true`, nil))
		// The run is fetched slowly (held 1.5 s, as the images were), and meanwhile the
		// conversation list is read again (a tool switched elsewhere): the answer still
		// lands in the open conversation.
		tb.run(t, "Show all, slowly", fetch.Enable().WithPatterns([]*fetch.RequestPattern{{URLPattern: "*/sandbox/executions/*"}}),
			press("button", "Show all", `[data-test="big"]`))
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": true}, nil)
		defer tb.run(t, "fetch as usual", fetch.Disable())
		if _, ok := poll(45*time.Second, func() bool {
			return chromedp.Run(tb.ctx, chromedp.Evaluate(cell+`.querySelector(".cell-out").textContent`, &text)) == nil && strings.Contains(text, marker)
		}); !ok {
			var seen string
			_ = chromedp.Run(tb.ctx, chromedp.Evaluate(`JSON.stringify({ ...window.seen, cells: document.querySelectorAll("#messages .cell").length,
				cell: (() => { const c = `+cell+`; return c && { test: c.dataset.test, execution: c.dataset.execution, showAll: !!c.showAll,
					more: c.querySelector(".cell-more")?.outerHTML, shown: c.querySelector(".cell-out").textContent.length } })() })`, &seen))
			tb.shot(t, "failure-show-all")
			t.Fatalf("after Show all the cell shows %d characters without its last line; the page: %s", len(text), seen)
		}
		if len(text) != full || !strings.HasPrefix(text, "0000 xxx") {
			t.Errorf("after Show all the cell shows %d characters, want the run's %d", len(text), full)
		}
		var found []cdp.BackendNodeID
		tb.run(t, "the button is gone", controls("button", "Show all", `[data-test="big"]`, &found))
		if len(found) != 0 {
			t.Error("Show all is still offered with everything shown")
		}
		tb.shot(t, "04-show-all-done")

		tb.run(t, "copy the output", press("button", "Copy output", `[data-test="big"]`))
		var copied string
		tb.run(t, "read the clipboard", until(`document.querySelector('[data-test="big"] .out-wrap .copy').textContent === "Copied"`),
			chromedp.Evaluate(`navigator.clipboard.readText()`, &copied, awaitPromise))
		if copied != text {
			t.Errorf("copied %d characters, want the %d shown", len(copied), len(text))
		}
		tb.run(t, "copy the code",
			chromedp.Evaluate(`document.querySelector('[data-test="big"]').scrollIntoView(); true`, nil),
			press("button", "Copy code", `[data-test="big"]`),
			until(`document.querySelector('[data-test="big"] .cell-code .copy').textContent === "Copied"`),
			chromedp.Evaluate(`navigator.clipboard.readText()`, &copied, awaitPromise))
		if want := "for i in range(500):\n    print(f'{i:04d} ' + 'x' * 95)\nprint('" + marker + "')\n"; copied != want {
			t.Errorf("copied code %q, want %q", copied, want)
		}
		// The history drawn again in the same page (here: another conversation opened
		// and this one again; a reconnect may do the same) keeps the run whole.
		other := alice.createConversation(agent.ID)
		tb.run(t, "away and back, it still shows all",
			chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"; true`, other), nil),
			until(`!document.querySelector("#messages .cell")`),
			chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"; true`, conv), nil),
			until(cell+`?.dataset.done`),
			chromedp.Evaluate(cell+`.setAttribute("data-test", "big"); `+cell+`.querySelector(".cell-out").textContent`, &text),
			controls("button", "Show all", `[data-test="big"]`, &found),
		)
		if len(text) != full || len(found) != 0 {
			t.Errorf("drawn again, the cell shows %d characters of %d (Show all offered: %v)", len(text), full, len(found) > 0)
		}
		tb.run(t, "after a reload it is offered again",
			chromedp.Reload(),
			until(cell+`?.dataset.done`),
			chromedp.Evaluate(cell+`.setAttribute("data-test", "big"); `+cell+`.querySelector(".cell-out").textContent.length`, &shown),
			controls("button", "Show all", `[data-test="big"]`, &found),
		)
		if len(found) != 1 || shown > 17<<10 {
			t.Errorf("after a reload: %d Show all buttons, %d characters shown", len(found), shown)
		}
	})

	t.Run("a code block of a reply copies", func(t *testing.T) {
		var copied string
		tb.run(t, "copy the last reply's block",
			chromedp.Evaluate(`[...document.querySelectorAll("#messages > .msg.assistant")].pop().setAttribute("data-test", "reply"); true`, nil),
			press("button", "Copy code", `[data-test="reply"]`),
			chromedp.Evaluate(`navigator.clipboard.readText()`, &copied, awaitPromise),
		)
		if !strings.HasPrefix(copied, "0000 xxx") {
			t.Errorf("copied %.40q from the reply's block", copied)
		}
	})

	for _, size := range [][2]int64{{1366, 850}, {390, 844}} {
		t.Run(fmt.Sprintf("toasts stay off the controls at %d px", size[0]), func(t *testing.T) {
			var overlaps []string
			tb.run(t, "toggle the sandbox in the popup, with a tall message box",
				chromedp.EmulateViewport(size[0], size[1]),
				until(`innerWidth > 720 || document.querySelector("#sidebar").getBoundingClientRect().right <= 0`),
				chromedp.Evaluate(`document.querySelector("#input").style.height = "220px"; true`, nil),
				chromedp.Click("#tools-button", chromedp.ByID),
				chromedp.WaitVisible("#tools-popup", chromedp.ByID),
				// Clicked from the page: the popup is redrawn after each change, and a node
				// found by the driver may be gone by the time it clicks it.
				chromedp.Evaluate(`document.querySelector("#tool-pyodide_sandbox").click(); true`, nil),
				until(hasToast("Internal tools configuration updated")),
				chromedp.Evaluate(`document.querySelector("#tool-pyodide_sandbox").click(); true`, nil),
				until(`document.querySelectorAll(".toast").length >= 2`),
				// The toasts move to their place on the next frame after a control under them
				// moves (the popup is redrawn after each change): wait until they have, then
				// measure.
				settle(toastOverlaps+".length === 0", 2*time.Second),
				chromedp.Evaluate(toastOverlaps, &overlaps),
			)
			tb.shot(t, fmt.Sprintf("05-toasts-%d", size[0]))
			if len(overlaps) > 0 {
				t.Errorf("toasts over controls: %q", overlaps)
			}
			tb.run(t, "close the popup", chromedp.Evaluate(`document.querySelector("#input").style.height = ""; true`, nil),
				chromedp.Click("#tools-button", chromedp.ByID), chromedp.WaitNotVisible("#tools-popup", chromedp.ByID))
		})
	}
}

// TestBrowserAgentChildren: the swarm children of the agent form are a list, one agent
// a row, its checkbox beside its name, at both sizes.
func TestBrowserAgentChildren(t *testing.T) {
	e := newEnv(t)
	m := e.node()
	alice, _ := m.user(t, "alice", false)
	parent := alice.createAgent(map[string]any{"name": "Lead", "model": "builtin"})
	for _, name := range []string{"helper", "checker", "writer"} {
		alice.createAgent(map[string]any{"name": name, "model": "builtin", "description": "does " + name + " work"})
	}
	tb := openTab(t, browser(t), "alice", screenshotDir(t))
	tb.run(t, "open the parent",
		chromedp.Navigate(fmt.Sprintf("http://%s/#/agents/%d", m.Addr(), parent.ID)),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(`document.querySelector("#agent-title").textContent === "Lead" && document.querySelectorAll("#agent-children input").length === 3`),
	)
	for _, size := range [][2]int64{{1366, 850}, {390, 844}} {
		var rows []struct {
			Top, BoxW, BoxMid, LabelMid, LabelLeft, BoxRight float64
		}
		var found []cdp.BackendNodeID
		tb.run(t, "measure the rows",
			chromedp.EmulateViewport(size[0], size[1]),
			chromedp.Evaluate(`document.querySelector("#agent-children").scrollIntoView(); true`, nil),
			controls("checkbox", "checker", "#agent-children", &found),
			chromedp.Evaluate(`[...document.querySelectorAll("#agent-children > li")].map((li) => {
  const b = li.querySelector("input").getBoundingClientRect(), l = li.querySelector("label").getBoundingClientRect();
  return { Top: li.getBoundingClientRect().top, BoxW: b.width, BoxMid: b.top + b.height / 2, LabelMid: l.top + l.height / 2, LabelLeft: l.left, BoxRight: b.right };
})`, &rows),
		)
		tb.shot(t, fmt.Sprintf("children-%d", size[0]))
		if len(found) != 1 || len(rows) != 3 {
			t.Fatalf("%d checkboxes named checker, %d rows", len(found), len(rows))
		}
		for i, r := range rows {
			if r.BoxW > 30 || r.LabelLeft < r.BoxRight || r.LabelMid-r.BoxMid > 6 || r.BoxMid-r.LabelMid > 6 || (i > 0 && r.Top <= rows[i-1].Top) {
				t.Errorf("at %d px row %d is not a checkbox beside its name, under the one before: %+v", size[0], i, r)
			}
		}
	}
}

// toastOverlaps is a JS expression: each visible toast (its part inside the toasts' box,
// which clips) that lies over a control of the chat, as "text covers control".
const toastOverlaps = `(() => {
  const controls = ["#composer", "#input", "#send", "#stop", ".input-toolbar", "#tools-popup", ".chat-head", ".jump-latest", "header.top"]
    .flatMap((s) => [...document.querySelectorAll(s)]).filter((e) => e.getClientRects().length);
  const box = document.querySelector(".toasts").getBoundingClientRect();
  const out = [];
  for (const t of document.querySelectorAll(".toast")) {
    const r = t.getBoundingClientRect();
    const a = { left: Math.max(r.left, box.left), right: Math.min(r.right, box.right), top: Math.max(r.top, box.top), bottom: Math.min(r.bottom, box.bottom) };
    if (a.bottom <= a.top || a.right <= a.left) continue;
    for (const c of controls) {
      const b = c.getBoundingClientRect();
      if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) out.push(t.firstChild.textContent + " covers " + (c.id || c.className));
    }
  }
  return out;
})()`

// settle waits up to d for the JS condition js to hold, and goes on either way: what
// follows measures the state it settled in.
func settle(js string, d time.Duration) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var ok bool
		_ = chromedp.Poll("(() => { try { return !!("+js+") } catch { return false } })()", &ok,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(d)).Do(ctx)
		return nil
	})
}
