package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

// outBox is a JS expression for the last output box of the cell whose code holds tag.
func outBox(tag string) string {
	return fmt.Sprintf(`[...(%s).querySelectorAll(".cell-out")].pop()`, cellOf(tag))
}

// boxAtEnd is a JS condition: the box shows its last line.
func boxAtEnd(box string) string {
	return fmt.Sprintf(`(() => { const p = %s; return p.scrollHeight > p.clientHeight + 40 && p.scrollHeight - p.scrollTop - p.clientHeight < 2 })()`, box)
}

// copyOverlaps is a JS expression: each Copy button of the messages that lies over the
// text, code, chart or image of its block, as "label covers what".
const copyOverlaps = `(() => {
  const out = [];
  for (const b of document.querySelectorAll("#messages .code-wrap > .copy")) {
    if (!b.getClientRects().length) continue;
    const r = b.getBoundingClientRect();
    for (const c of b.parentElement.querySelectorAll("pre, iframe, img, .display")) {
      for (const q of c.getClientRects()) {
        if (r.left < q.right && q.left < r.right && r.top < q.bottom && q.top < r.bottom) out.push(b.getAttribute("aria-label") + " covers " + c.tagName + "." + c.className);
      }
    }
  }
  return out;
})()`

// TestBrowserSmallTruths: the small things a user reads off the page are true. An output
// box follows its output, unless the reader scrolled inside it; a fast run says how
// many milliseconds it took; the Tools chip names what is on; a long title ends in "…";
// Enter inside an open ``` block is a new line; Copy buttons cover nothing. (Output
// order: TestBrowserStreamOrder.)
func TestBrowserSmallTruths(t *testing.T) {
	e := newEnv(t)
	m := e.sandboxNode()
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Analyst", "model": "builtin", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	base := "http://" + m.Addr()
	tb := openTab(t, browser(t), "alice", screenshotDir(t))
	tb.run(t, "sign in",
		chromedp.EmulateViewport(1366, 850),
		chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(`document.querySelector("#conv-title").textContent === "test" && !document.querySelector("#input").disabled`),
	)

	t.Run("a stopped cell says what its record says was restored and lost", func(t *testing.T) {
		// Code that swallows the interrupt is ended with its process.
		code := "stubborn = 5\nprint('stubborn before', flush=True)\nimport time\nwhile True:\n    try:\n        time.sleep(30)\n    except KeyboardInterrupt:\n        pass"
		cell := `[...document.querySelectorAll("#messages .cell")].find((c) => c.querySelector(".cell-code").textContent.includes("stubborn before"))`
		var status, note string
		read := chromedp.Tasks{
			until(cell + `?.dataset.done && ` + cell + `.querySelector(".status").textContent.startsWith("stopped")`),
			chromedp.Evaluate(cell+`.querySelector(".status").textContent`, &status),
			chromedp.Evaluate(`(`+cell+`.querySelector(".stop-note") || {}).textContent || ""`, &note),
		}
		tb.run(t, "run it and stop it",
			say(py(code)),
			until(cell+`?.querySelector(".cell-out")?.textContent.includes("stubborn before")`),
			// Stopped as Stop does (TestBrowserChat presses it): what is shown here comes
			// from the run's record.
			until(cell+`.dataset.turn`),
			chromedp.ActionFunc(func(ctx context.Context) error {
				var turn string
				if err := chromedp.Evaluate(cell+`.dataset.turn`, &turn).Do(ctx); err != nil {
					return err
				}
				alice.must(202, "POST", fmt.Sprintf("/api/v1/conversations/%d/turns/%s/cancel", conv, turn), nil, nil)
				return nil
			}),
			read,
		)
		tb.shot(t, "09-stopped")
		var runs []struct {
			Code  string
			Error struct{ Type, Message string }
		}
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), nil, &runs)
		var want string
		for _, r := range runs {
			if strings.Contains(r.Code, "stubborn before") {
				want = r.Error.Message
			}
		}
		if want == "" {
			t.Fatalf("the stopped run's record says nothing: %+v", runs)
		}
		for _, when := range []string{"live", "after a reload"} {
			if when != "live" {
				tb.run(t, "reload", chromedp.Reload(), read)
			}
			if status != "stopped · state restored" || note != want {
				t.Errorf("%s the stopped cell says %q and %q, want what its record says: %q", when, status, note, want)
			}
		}
	})

	t.Run("the output box follows its output, during and after the run", func(t *testing.T) {
		const tag = "box"
		code := fmt.Sprintf("```python\nimport time\nfor i in range(40):\n    print('%s line', i, flush=True)\n    time.sleep(0.05)\n```", tag)
		// Where the box is and how far it can go are read at one instant: a line may come
		// between two reads, and the box follows it at once.
		var box struct{ Top, End float64 }
		read := chromedp.Evaluate(`(() => { const p = `+outBox(tag)+`; return { Top: p.scrollTop, End: p.scrollHeight - p.clientHeight } })()`, &box)
		tb.run(t, "run it and watch the box while lines come",
			say(code),
			until(fmt.Sprintf(`%s.length >= 25`, linesOf(tag))),
			until(fmt.Sprintf(`!%s.dataset.done`, cellOf(tag))),
			read,
		)
		tb.shot(t, "01-box-following")
		if box.End <= 40 || box.End-box.Top > 2 {
			t.Errorf("while lines come the box is at %v of %v", box.Top, box.End)
		}
		tb.run(t, "after the run the box shows its last line",
			until(fmt.Sprintf(`%s.dataset.done && !document.querySelector("#send").hidden`, cellOf(tag))),
			read,
		)
		if box.End <= 40 || box.End-box.Top > 2 {
			t.Errorf("after the run the box is at %v of %v", box.Top, box.End)
		}
	})

	t.Run("a reader who scrolled up inside the box is left there", func(t *testing.T) {
		const tag = "reader"
		var n int
		var top float64
		tb.run(t, "run it, and scroll up inside the box once it overflows",
			say(fmt.Sprintf("```python\nimport time\nfor i in range(60):\n    print('%s line', i, flush=True)\n    time.sleep(0.1)\n```", tag)),
			until(boxAtEnd(outBox(tag))),
			chromedp.Evaluate(outBox(tag)+`.scrollTop = 0; true`, nil),
			chromedp.Evaluate(linesOf(tag)+`.length`, &n),
		)
		tb.run(t, "lines keep coming and the box stays put",
			until(fmt.Sprintf(`%s.length >= %d`, linesOf(tag), n+5)),
			chromedp.Evaluate(outBox(tag)+`.scrollTop`, &top),
		)
		if top != 0 {
			t.Errorf("the box moved to %v while the reader read its top", top)
		}
		tb.run(t, "after the run too",
			until(fmt.Sprintf(`%s.dataset.done && !document.querySelector("#send").hidden`, cellOf(tag))),
			chromedp.Evaluate(outBox(tag)+`.scrollTop`, &top),
		)
		if top != 0 {
			t.Errorf("the finished box moved to %v, away from where the reader left it", top)
		}
	})

	t.Run("a fast run says its milliseconds", func(t *testing.T) {
		var status string
		tb.run(t, "run it",
			say(py("fast = 1")),
			until(lastCell+`?.dataset.done && `+lastCell+`.querySelector(".cell-code").textContent.includes("fast = 1")`),
			chromedp.Evaluate(lastCell+`.querySelector(".status").textContent`, &status),
		)
		if !regexp.MustCompile(`^done in \d+ ms$`).MatchString(status) {
			t.Errorf("a fast run says %q, want its milliseconds", status)
		}
	})

	t.Run("the Tools chip names what is on", func(t *testing.T) {
		tb.run(t, "Python on, from the agent", until(toolsButton("Internal tools: Python sandbox on", "Python")))
		tools := fmt.Sprintf("/api/v1/conversations/%d/internal-tools/", conv)
		alice.must(200, "PUT", tools+"pyodide_sandbox", map[string]any{"enabled": false}, nil)
		alice.must(200, "PUT", tools+"swarm_mode", map[string]any{"enabled": true}, nil)
		tb.run(t, "only Swarm mode on", until(toolsButton("Internal tools: Swarm mode on", "Swarm")))
		tb.shot(t, "02-tools-swarm")
		alice.must(200, "PUT", tools+"pyodide_sandbox", map[string]any{"enabled": true}, nil)
		tb.run(t, "both on", until(toolsButton("Internal tools: Python sandbox, Swarm mode on", "Python + Swarm")))
		alice.must(200, "PUT", tools+"swarm_mode", map[string]any{"enabled": nil}, nil)
		alice.must(200, "PUT", tools+"pyodide_sandbox", map[string]any{"enabled": nil}, nil)
		tb.run(t, "back to the agent's", until(toolsButton("Internal tools: Python sandbox on", "Python")))
	})

	t.Run("Enter inside an open python block is a new line", func(t *testing.T) {
		var value string
		var users, before int
		tb.run(t, "type an open block and press Enter",
			chromedp.Evaluate(`document.querySelectorAll("#messages .msg.user").length`, &before),
			chromedp.SetValue("#input", "Run this: ```python\nfenced = 2", chromedp.ByID),
			chromedp.Focus("#input", chromedp.ByID),
			chromedp.Evaluate(`const i = document.querySelector("#input"); i.selectionStart = i.selectionEnd = i.value.length; true`, nil),
			chromedp.KeyEvent(kb.Enter),
			chromedp.KeyEvent("print(fenced)"),
			chromedp.Evaluate(`document.querySelector("#input").value`, &value),
			chromedp.Evaluate(`document.querySelectorAll("#messages .msg.user").length`, &users),
		)
		if value != "Run this: ```python\nfenced = 2\nprint(fenced)" || users != before {
			t.Fatalf("after Enter in the open block the box holds %q and %d messages were sent", value, users-before)
		}
		tb.run(t, "closed, Enter sends it",
			chromedp.KeyEvent(kb.Enter),
			chromedp.KeyEvent("```"),
			chromedp.KeyEvent(kb.Enter),
			until(`document.querySelector("#input").value === ""`),
			until(lastCell+`?.dataset.done && `+lastCell+`.querySelector(".cell-out")?.textContent === "2\n"`),
		)
	})

	t.Run("Copy buttons cover no text and no chart", func(t *testing.T) {
		code := "print('first line ' + 'x' * 300)\nprint('second')\n" +
			`display({"application/vnd.plotly.v1+json": {"data": [{"type": "bar", "x": ["a", "b"], "y": [3, 5]}], "layout": {"height": 300}}, "text/plain": "Figure()"}, raw=True)`
		chartOnly := `[...document.querySelectorAll("#messages .cell")].find((c) => c.querySelector(".cell-code").textContent.includes('"x": ["c"]'))`
		var overlaps []string
		tb.run(t, "run a cell with a long first line and a chart, then one with only a chart",
			say("Here is `the code`:\n```python\n"+code+"\n```"),
			until(lastCell+`?.dataset.done && `+lastCell+`.querySelector("iframe.display-frame")`),
			say(py(`display({"application/vnd.plotly.v1+json": {"data": [{"type": "bar", "x": ["c"], "y": [1]}]}, "text/plain": "Figure()"}, raw=True)`)),
			until(chartOnly+`?.dataset.done && `+chartOnly+`.querySelector("iframe.display-frame") && !document.querySelector("#send").hidden`),
			chromedp.Evaluate(copyOverlaps, &overlaps),
		)
		tb.shot(t, "03-copy-buttons")
		if len(overlaps) > 0 {
			t.Errorf("Copy buttons over content: %q", overlaps)
		}
		var offered []string
		tb.run(t, "a cell that printed nothing offers no Copy output",
			chromedp.Evaluate(`[...`+chartOnly+`.querySelectorAll(".copy")].filter((b) => b.getClientRects().length).map((b) => b.getAttribute("aria-label"))`, &offered))
		if strings.Join(offered, ",") != "Copy code" {
			t.Errorf("a cell with only a chart offers %q", offered)
		}
	})

	t.Run("a long title ends in an ellipsis in the sidebar", func(t *testing.T) {
		title := strings.Repeat("A quarterly revenue analysis ", 8)
		alice.must(200, "PATCH", fmt.Sprintf("/api/v1/conversations/%d", conv), map[string]any{"title": title}, nil)
		var r struct {
			Sideways bool    `json:"sideways"`
			Right    float64 `json:"right"`
			Aside    float64 `json:"aside"`
			Cut      bool    `json:"cut"`
		}
		tb.run(t, "reload and measure",
			chromedp.Reload(),
			until(fmt.Sprintf(`document.querySelector('#convs [data-conv="%d"] .nav-title')?.textContent.startsWith("A quarterly") && document.querySelector("#sidebar").getBoundingClientRect().width > 0`, conv)),
			chromedp.Evaluate(fmt.Sprintf(`(() => { const a = document.querySelector("#sidebar"), t = document.querySelector('#convs [data-conv="%d"] .nav-title');
  return { sideways: a.scrollWidth > a.clientWidth, right: t.getBoundingClientRect().right, aside: a.getBoundingClientRect().right,
    cut: t.scrollWidth > t.clientWidth && getComputedStyle(t).textOverflow === "ellipsis" } })()`, conv), &r),
		)
		tb.shot(t, "04-long-title")
		if r.Sideways || r.Right > r.Aside || !r.Cut {
			t.Errorf("the long title: sidebar scrolls sideways %v, title ends at %v of the sidebar's %v, cut with an ellipsis %v", r.Sideways, r.Right, r.Aside, r.Cut)
		}
	})

	t.Run("a trailing expression with _repr_mimebundle_ shows its richest form only", func(t *testing.T) {
		code := "class Fig:\n    def _repr_mimebundle_(self, include=None, exclude=None):\n        return {'text/html': '<b>fig body</b>', 'text/plain': 'Fig(3 bars)'}\nFig()"
		cell := `[...document.querySelectorAll("#messages .cell")].find((c) => c.querySelector(".cell-code").textContent.includes("class Fig"))`
		var r struct {
			Bodies int    `json:"bodies"`
			Texts  int    `json:"texts"`
			Text   string `json:"text"`
		}
		measure := chromedp.Evaluate(`(() => { const c = `+cell+`, t = c.querySelector(".cell-stream").innerText + "\n" + c.querySelector(".cell-result").innerText;
  return { bodies: t.split("fig body").length - 1, texts: t.split("Fig(3 bars)").length - 1, text: t } })()`, &r)
		for _, when := range []string{"live", "after a reload"} {
			if when == "live" {
				tb.run(t, "run it", say(py(code)), until(cell+`?.dataset.done && !document.querySelector("#send").hidden`), measure)
			} else {
				tb.run(t, "reload", chromedp.Reload(), until(cell+`?.dataset.done`), measure)
			}
			if r.Bodies != 1 || r.Texts != 0 || strings.Contains(r.Text, "__main__") {
				t.Errorf("%s the cell shows %q: want the bundle's richest item once, and not its text/plain", when, r.Text)
			}
		}
	})

	t.Run("a displayed Image keeps the width and height it was given", func(t *testing.T) {
		code := sandboxtest.RichDisplay + "\nfrom IPython.display import Image, display\ndisplay(Image(data=make_png(1, 1), width=300, height=200))\ndisplay(Image(data=make_png(2, 2), width=120))"
		cell := `[...document.querySelectorAll("#messages .cell")].find((c) => c.querySelector(".cell-code").textContent.includes("width=300"))`
		var sizes [][2]float64
		measure := chromedp.Tasks{
			until(cell + `?.dataset.done && [...` + cell + `.querySelectorAll("img.display-image")].length === 2 && [...` + cell + `.querySelectorAll("img.display-image")].every((i) => i.complete && i.naturalWidth > 0)`),
			chromedp.Evaluate(`[...`+cell+`.querySelectorAll("img.display-image")].map((i) => { const r = i.getBoundingClientRect(); return [r.width, r.height] })`, &sizes),
		}
		for _, when := range []string{"live", "after a reload"} {
			if when == "live" {
				tb.run(t, "run it", say(py(code)), measure)
			} else {
				tb.run(t, "reload", chromedp.Reload(), measure)
			}
			if len(sizes) != 2 || sizes[0] != [2]float64{300, 200} || sizes[1] != [2]float64{120, 120} {
				t.Errorf("%s the images are drawn at %v, want 300×200 and 120×120", when, sizes)
			}
		}
		tb.shot(t, "05-image-size")
	})

	t.Run("an interactive frame is the same frame after its run ends", func(t *testing.T) {
		// The frame says each time it loads; one that loads again has lost what the
		// reader did in it.
		code := "import time\ndisplay({'text/html': \"<p>counter</p><script>parent.postMessage({type: 'test.loaded'}, '*')</script>\", 'text/plain': 'counter'}, raw=True)\ntime.sleep(2)\nprint('frame run over')"
		cell := `[...document.querySelectorAll("#messages .cell")].find((c) => c.querySelector(".cell-code").textContent.includes("frame run over"))`
		var loads int
		tb.run(t, "count the frame's loads, run it",
			chromedp.Evaluate(`window.loads = 0; addEventListener("message", (e) => { if (e.data?.type === "test.loaded") window.loads++ }); true`, nil),
			say(py(code)),
			until(`window.loads === 1`),
			until(cell+`?.dataset.done && `+cell+`.querySelector(".cell-out")?.textContent.includes("frame run over")`),
			settle(`window.loads > 1`, 3*time.Second),
			chromedp.Evaluate(`window.loads`, &loads),
		)
		if loads != 1 {
			t.Errorf("the frame loaded %d times: its run's end drew it anew", loads)
		}
	})

	// Toasts float: nothing moves when they come (a click meant for a control lands on
	// it), they take no click, and they cover no control outside the conversation's
	// content (over which they pass, a click going through them).
	t.Run("toasts move nothing, take no click and cover no control", func(t *testing.T) {
		alice.createAgent(map[string]any{"name": "helper", "model": "builtin", "description": "helps"})
		tools := fmt.Sprintf("/api/v1/conversations/%d/internal-tools/swarm_mode", conv)
		tb.run(t, "an answer with Regenerate under it", say(py("toasted = 1")),
			until(lastCell+`?.dataset.done && document.querySelector("#messages .msg-actions button")`))
		for _, size := range [][2]int64{{390, 844}, {1366, 850}} {
			var covered []string
			var before, after []float64
			layout := `[...document.querySelectorAll("#rename, #messages, #messages > li:last-of-type, #input")].map((e) => e.getBoundingClientRect().top)`
			tb.run(t, "two toasts in the chat",
				chromedp.EmulateViewport(size[0], size[1]),
				chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
				until(`document.querySelector("#messages .msg-actions button") && !document.querySelector("#input").disabled`),
				until(narrow),
				chromedp.Evaluate(layout, &before),
				chromedp.ActionFunc(func(context.Context) error {
					alice.must(200, "PUT", tools, map[string]any{"enabled": true}, nil)
					alice.must(200, "PUT", tools, map[string]any{"enabled": nil}, nil)
					return nil
				}),
				until(`document.querySelectorAll(".toast").length >= 2`),
				// The toasts push the page down as they come in: judge the layout once it
				// settles, while both are still shown (a covering that lasts fails).
				chromedp.ActionFunc(func(ctx context.Context) error {
					var err error
					poll(2*time.Second, func() bool {
						var shown int
						if err = chromedp.Evaluate(`document.querySelectorAll(".toast").length`, &shown).Do(ctx); err != nil {
							return true
						}
						err = chromedp.Evaluate(toastCovers, &covered).Do(ctx)
						return err != nil || len(covered) == 0 || shown < 2
					})
					return err
				}),
				chromedp.Evaluate(layout, &after),
			)
			tb.shot(t, fmt.Sprintf("06-toasts-chat-%d", size[0]))
			if len(covered) > 0 {
				t.Errorf("at %d px toasts in the chat cover %q", size[0], covered)
			}
			if fmt.Sprint(before) != fmt.Sprint(after) {
				t.Errorf("at %d px the toasts moved the page: %v, then %v", size[0], before, after)
			}
			tb.run(t, "a toast on the agent's page",
				chromedp.Navigate(fmt.Sprintf("%s/#/agents/%d", base, agent.ID)),
				chromedp.Reload(),
				until(`document.querySelector("#agent-title").textContent === "Analyst" && document.querySelectorAll("#agent-children input").length === 1`),
				chromedp.Click("#agent-save", chromedp.ByID),
				until(hasToast("Agent saved")),
				chromedp.Evaluate(toastCovers, &covered),
			)
			tb.shot(t, fmt.Sprintf("07-toasts-agent-%d", size[0]))
			if len(covered) > 0 {
				t.Errorf("at %d px a toast on the agent's page covers %q", size[0], covered)
			}
		}
		tb.run(t, "back to the chat", chromedp.EmulateViewport(1366, 850), chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
			until(`document.querySelector("#conv-title").textContent !== "New chat" && document.querySelector("#messages .msg-actions button")`))
	})

	t.Run("LaTeX in a message and in a display item is drawn as math", func(t *testing.T) {
		var r struct {
			Maths int     `json:"maths"`
			Width float64 `json:"width"`
			Text  string  `json:"text"`
			Frac  bool    `json:"frac"`
		}
		tb.run(t, "send math, prices and code",
			say("Einstein: $E=mc^2$, prices $5 and $10, code `$x$`\n\n$$\\int_0^1 x\\,dx$$"),
			until(`[...document.querySelectorAll("#messages .msg.user")].pop()?.querySelectorAll("math").length === 2`),
			chromedp.Evaluate(`(() => { const m = [...document.querySelectorAll("#messages .msg.user")].pop(), ms = [...m.querySelectorAll("math")];
  return { maths: ms.length, width: Math.min(...ms.map((x) => x.getBoundingClientRect().width)), text: m.querySelector(".md").innerText, frac: false } })()`, &r),
		)
		tb.shot(t, "08-latex")
		if r.Maths != 2 || r.Width < 10 || strings.Contains(r.Text, "$E=mc^2$") || strings.Contains(r.Text, "\\int") ||
			!strings.Contains(r.Text, "prices $5 and $10") || !strings.Contains(r.Text, "$x$") {
			t.Errorf("the message reads %q with %d formulas (narrowest %v px): want two drawn, the prices and the code as written", r.Text, r.Maths, r.Width)
		}
		cell := `[...document.querySelectorAll("#messages .cell")].find((c) => c.querySelector(".cell-code").textContent.includes("Latex("))`
		tb.run(t, "display a Latex item",
			say(py("from IPython.display import Latex, display\ndisplay(Latex(r'$$\\frac{a}{b}$$'))")),
			until(cell+`?.dataset.done && `+cell+`.querySelector(".display math mfrac")`),
			chromedp.Evaluate(`(() => { const d = `+cell+`.querySelector(".display"); return { maths: d.querySelectorAll("math").length, width: d.querySelector("math").getBoundingClientRect().width, text: d.innerText, frac: !!d.querySelector("mfrac") } })()`, &r),
		)
		if r.Maths != 1 || !r.Frac || r.Width < 5 || strings.Contains(r.Text, "$$") {
			t.Errorf("the Latex item reads %q: want the fraction drawn", r.Text)
		}
	})
}

// toastCovers is a JS expression: a toast that takes the click at its middle, else each
// visible control outside the conversation's content that a toast lies over, as "toast
// covers what". What shows of an element is its box within the boxes that clip it.
const toastCovers = `(() => {
  for (const t of document.querySelectorAll(".toast")) {
    const r = t.getBoundingClientRect(), e = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    if (e?.closest("#toasts")) return [t.firstChild.textContent + " takes the click at its middle"];
  }
  const shown = (e) => {
    let r = e.getBoundingClientRect(), b = { left: r.left, right: r.right, top: r.top, bottom: r.bottom };
    const clip = (q) => { b = { left: Math.max(b.left, q.left), right: Math.min(b.right, q.right), top: Math.max(b.top, q.top), bottom: Math.min(b.bottom, q.bottom) }; };
    for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
      const cs = getComputedStyle(a);
      if (cs.overflowX !== "visible" || cs.overflowY !== "visible") clip(a.getBoundingClientRect());
    }
    clip({ left: 0, top: 0, right: innerWidth, bottom: innerHeight });
    return b;
  };
  const things = [...document.querySelectorAll("button, a[href], input, select, textarea, summary, [role=switch], label, .banner")]
    .filter((e) => !e.closest("#toasts, #messages") && e.getClientRects().length && getComputedStyle(e).visibility !== "hidden");
  const out = [];
  for (const t of document.querySelectorAll(".toast")) {
    const r = t.getBoundingClientRect();
    for (const c of things) {
      const b = shown(c);
      if (b.right > b.left && b.bottom > b.top && r.left < b.right && b.left < r.right && r.top < b.bottom && b.top < r.bottom) out.push(t.firstChild.textContent + " covers " + c.tagName + "#" + c.id + "." + c.className);
    }
  }
  return out;
})()`
