package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

// browserConversation starts a node with the sandbox, signs alice in in a new tab and
// opens a conversation with a coding agent.
func browserConversation(t *testing.T) (*tab, *client, int64, string) {
	t.Helper()
	e := newEnv(t)
	m := e.sandboxNode()
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Analyst", "model": "builtin", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	base := "http://" + m.Addr()
	tb := openTab(t, browser(t), "tab", screenshotDir(t))
	tb.run(t, "sign in",
		chromedp.EmulateViewport(1366, 850),
		chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(`document.querySelector("#conv-title").textContent === "test" && !document.querySelector("#input").disabled`),
	)
	return tb, alice, conv, base
}

// streamOrder is a JS expression: what a cell's output area holds, in order, each part
// as "out:<text>" or "display:<label>".
func streamOrder(cell string) string {
	return `[...` + cell + `.querySelector(".cell-stream").children].map((e) => e.matches("pre.cell-out") ? "out:" + e.textContent : "display:" + e.getAttribute("aria-label"))`
}

// TestBrowserOutputOrder: printed text, a table and an image show in the order the
// code produced them, while it runs and after a reload.
func TestBrowserOutputOrder(t *testing.T) {
	tb, alice, conv, _ := browserConversation(t)
	if r := alice.run(conv, sandboxtest.RichDisplay); r.Status != "success" {
		t.Fatalf("setup: %+v", r)
	}
	code := `import time
print("one")
display(Table())
print("two")
display(Picture())
time.sleep(2)
print("three")`
	want := []string{"out:one\n", "display:Display 1: HTML", "out:two\n", "display:Display 2: image"}
	wantDone := append(want[:len(want):len(want)], "out:three\n")
	cell := `[...document.querySelectorAll("#messages .cell")].find((c) => c.textContent.includes('print("two")'))`
	var live, done, reloaded []string
	tb.run(t, "while it runs",
		say(py(code)),
		until(cell+`?.querySelector(".display-pending") && `+cell+`.querySelectorAll(".cell-stream > .display").length === 2 && !`+cell+`.dataset.done`),
		chromedp.Evaluate(streamOrder(cell), &live),
	)
	tb.shot(t, "order-running")
	tb.run(t, "when done",
		until(cell+`?.dataset.done && `+cell+`.querySelector("img.display-image")?.naturalWidth === 12`),
		chromedp.Evaluate(streamOrder(cell), &done),
	)
	tb.run(t, "after a reload",
		chromedp.Reload(),
		until(cell+`?.dataset.done && `+cell+`.querySelector("img.display-image")?.naturalWidth === 12`),
		chromedp.Evaluate(streamOrder(cell), &reloaded),
	)
	tb.shot(t, "order-reloaded")
	if strings.Join(live, "|") != strings.Join(want, "|") {
		t.Errorf("while running: %q, want %q", live, want)
	}
	if strings.Join(done, "|") != strings.Join(wantDone, "|") {
		t.Errorf("done: %q, want %q", done, wantDone)
	}
	if strings.Join(reloaded, "|") != strings.Join(wantDone, "|") {
		t.Errorf("after a reload: %q, want %q", reloaded, wantDone)
	}
}

// frameProbe is an interactive display: its script changes its own DOM, then tries the
// page, the token, the cookies and the network, and posts what it found to the page.
const frameProbe = `from IPython.display import HTML
display(HTML("""<div id="out">static</div>
<script>
const r = { type: "probe" };
document.getElementById("out").textContent = "changed by its script";
r.dom = document.getElementById("out").textContent;
try { r.parent = "reached " + window.parent.document.title; } catch (e) { r.parent = "blocked: " + e.name; }
try { r.token = "reached " + localStorage.getItem("sandchat.token"); } catch (e) { r.token = "blocked: " + e.name; }
try { r.cookie = "reached " + document.cookie; } catch (e) { r.cookie = "blocked: " + e.name; }
fetch("NETWORK/fetch").then(() => { r.fetch = "reached"; }, (e) => { r.fetch = "failed: " + e.name; })
  .finally(() => parent.postMessage(r, "*"));
</script>"""))
display({"application/vnd.plotly.v1+json": {"data": [{"type": "bar", "x": ["north", "south"], "y": [3, 5]}],
         "layout": {"title": {"text": "Sales by region"}, "height": 320}}, "text/plain": "Figure()"}, raw=True)`

// TestBrowserInteractiveDisplays: HTML with scripts runs in a sandboxed frame, where it
// can change its own document but not reach the page, the token or the network; a
// Plotly figure is drawn by the vendored Plotly in its frame; neither raises a CSP
// error in the page, live or after a reload.
func TestBrowserInteractiveDisplays(t *testing.T) {
	var hits atomic.Int64
	network := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(network.Close)
	tb, _, _, _ := browserConversation(t)
	// The probe's own fetch is refused by the frame's policy, and the browser says so.
	tb.allow(`Fetch API cannot load ` + network.URL + `/fetch. Refused to connect because it violates the document's Content Security Policy.`)
	tb.allow(`Connecting to '` + network.URL + `/fetch' violates the following Content Security Policy directive: "default-src 'none'"`)

	cell := `[...document.querySelectorAll("#messages .cell")].find((c) => c.textContent.includes("Sales by region"))`
	check := func(t *testing.T, when string) {
		var probe map[string]string
		tb.run(t, when+": the probe reports",
			until(`window.probes?.length`),
			chromedp.Evaluate(`window.probes[0]`, &probe),
		)
		if probe["dom"] != "changed by its script" {
			t.Errorf("%s: the script did not run in its frame: %q", when, probe)
		}
		for _, k := range []string{"parent", "token", "cookie"} {
			if !strings.HasPrefix(probe[k], "blocked") {
				t.Errorf("%s: the frame's script reached the %s: %q", when, k, probe[k])
			}
		}
		if !strings.HasPrefix(probe["fetch"], "failed") || hits.Load() != 0 {
			t.Errorf("%s: the frame's script reached the network: %q, %d requests", when, probe["fetch"], hits.Load())
		}
		var frames []string
		tb.run(t, when+": both are sandboxed frames",
			chromedp.Evaluate(`[...`+cell+`.querySelectorAll("iframe.display-frame")].map((f) => f.getAttribute("sandbox") + " " + f.title)`, &frames),
		)
		if strings.Join(frames, "|") != "allow-scripts Display 1: interactive HTML|allow-scripts Display 2: interactive chart" {
			t.Errorf("%s: frames %q", when, frames)
		}
		if svg := frameEval(t, tb, `document.querySelectorAll("svg.main-svg").length + " " + (document.querySelector(".gtitle")?.textContent ?? "")`, "Sales by region"); !strings.HasSuffix(svg, " Sales by region") || strings.HasPrefix(svg, "0 ") {
			t.Errorf("%s: the Plotly frame holds %q, want its svg with the title", when, svg)
		}
		var height float64
		tb.run(t, when+": the chart's frame takes its height", until(cell+`.querySelectorAll("iframe.display-frame")[1].getBoundingClientRect().height >= 300`),
			chromedp.Evaluate(cell+`.querySelectorAll("iframe.display-frame")[1].getBoundingClientRect().height`, &height))
	}
	listen := chromedp.Evaluate(`window.probes = []; addEventListener("message", (e) => { if (e.data?.type === "probe") window.probes.push(e.data) }); true`, nil)

	tb.run(t, "run the cell", listen, say(py(strings.ReplaceAll(frameProbe, "NETWORK", network.URL))), until(cell+`?.dataset.done`))
	check(t, "live")
	tb.shot(t, "frames-wide")
	tb.run(t, "reload", chromedp.Reload(), until(cell+`?.dataset.done`), listen)
	check(t, "after a reload")
	tb.run(t, "at 390 px", chromedp.EmulateViewport(390, 844), chromedp.Reload(), until(cell+`?.dataset.done`),
		until(`document.querySelector("#sidebar").getBoundingClientRect().right <= 0`),
		until(cell+`.querySelectorAll("iframe.display-frame")[1].getBoundingClientRect().height >= 300`),
		chromedp.Evaluate(cell+`.querySelectorAll("iframe.display-frame")[1].scrollIntoView(); true`, nil), chromedp.Sleep(time.Second))
	tb.shot(t, "frames-phone")
	var width int
	tb.run(t, "fits", chromedp.Evaluate(`document.documentElement.scrollWidth`, &width))
	if width > 390 {
		t.Errorf("page is %d px wide at 390", width)
	}
}

// frameEval evaluates js in each display frame's document (the frames have an opaque
// origin, and the browser runs them as targets of their own) until one answers with a
// string containing want, and returns that answer, or the last one.
func frameEval(t *testing.T, tb *tab, js, want string) string {
	t.Helper()
	var got string
	attached := map[target.ID]context.Context{}
	tb.run(t, "look into the frames", chromedp.ActionFunc(func(ctx context.Context) error {
		for range 200 {
			targets, err := chromedp.Targets(ctx)
			if err != nil {
				return err
			}
			for _, x := range targets {
				if x.Type != "iframe" || !strings.HasSuffix(x.URL, "/frame.html") {
					continue
				}
				fctx, ok := attached[x.TargetID]
				if !ok {
					// Detached (and the frame's target closed) with the tab, at the test's end.
					fctx, _ = chromedp.NewContext(tb.ctx, chromedp.WithTargetID(x.TargetID))
					attached[x.TargetID] = fctx
					// What the frame logged (CSP violations among it) counts as the page's:
					// enabling the log replays what came before.
					chromedp.ListenTarget(fctx, func(ev any) {
						if e, ok := ev.(*cdplog.EventEntryAdded); ok && e.Entry.Level == cdplog.LevelError {
							tb.fail(fmt.Sprintf("frame log (%s): %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL))
						}
					})
					if err := chromedp.Run(fctx); err != nil {
						return fmt.Errorf("attach to the frame: %w", err)
					}
				}
				ectx, cancel := context.WithTimeout(fctx, 5*time.Second)
				err := chromedp.Run(ectx, chromedp.Evaluate(js, &got))
				cancel()
				if err == nil && strings.Contains(got, want) {
					return nil
				}
			}
			if err := chromedp.Sleep(100 * time.Millisecond).Do(ctx); err != nil {
				return err
			}
		}
		return nil
	}))
	return got
}
