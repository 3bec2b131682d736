package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

// notebookCode is notebook code that leans on IPython.display: an equation, a progress
// line redrawn with clear_output(wait=True), and a display handle updated in place.
const notebookCode = `from IPython.display import display, clear_output, Math, HTML
import time
display(Math(r"\int_0^1 x^2\,dx = \frac{1}{3}"))
bar = display(HTML("<b>progress 0%</b>"), display_id=True)
for i in range(1, 6):
    time.sleep(0.6)
    bar.update(HTML(f"<b>progress {i * 20}%</b>"))
for step in range(8):
    clear_output(wait=True)
    print(f"step {step} of 8", flush=True)
    time.sleep(0.4)
print("all done")`

// TestBrowserNotebookDisplays: code written for notebooks runs as there. Math draws an
// equation; a display handle's update redraws its item in place (one item, however many
// updates); clear_output(wait=True) leaves the latest lines only, while the cell runs
// and after a reload; a value with a rich form (an HTML table, a figure) shows that form
// once, not also its text. A stopped turn says "Stopped." under its answer, above
// Regenerate, live and after a reload.
func TestBrowserNotebookDisplays(t *testing.T) {
	tb, alice, conv, _ := browserConversation(t)
	if r := alice.run(conv, sandboxtest.RichDisplay); r.Status != "success" {
		t.Fatalf("setup: %+v", r)
	}
	cell := `[...document.querySelectorAll("#messages .cell")].find((c) => c.textContent.includes("progress 0%"))`
	type view struct {
		Out      string   `json:"out"`
		Items    []string `json:"items"`
		Math     int      `json:"math"`
		Progress []string `json:"progress"`
		Status   string   `json:"status"`
	}
	look := `(() => { const c = ` + cell + `; return {
  out: [...c.querySelectorAll(".cell-out")].map((p) => p.textContent).join(""),
  items: [...c.querySelectorAll(".cell-stream > .display")].map((d) => d.getAttribute("aria-label")),
  math: c.querySelectorAll(".display math").length,
  progress: [...c.querySelectorAll(".display b")].map((b) => b.textContent),
  status: c.querySelector(".status").textContent } })()`
	read := func(v *view) chromedp.Action { return chromedp.Evaluate(look, v) }
	// seen keeps the look taken when when first held: the cell changes every half second,
	// and a later look (on a busy machine) would see a later state.
	seen := func(when string, v *view) chromedp.Action {
		return chromedp.Tasks{
			chromedp.Evaluate(`window.seen = null; true`, nil),
			until(`(() => { const v = ` + look + `; if (!(` + when + `)) return false; window.seen = v; return true })()`),
			chromedp.Evaluate(`window.seen`, v),
		}
	}
	var updating, clearing, done, reloaded view
	tb.run(t, "run it: the handle's item is updated in place",
		say(py(notebookCode)),
		seen(`/^progress [4-9]0%$|^progress 100%$/.test(v.progress[0] ?? "") && !v.out`, &updating),
	)
	tb.shot(t, "01-updating")
	tb.run(t, "clear_output(wait=True) keeps the latest line",
		seen(`/step [3-7] of 8/.test(v.out)`, &clearing),
	)
	tb.shot(t, "02-clearing")
	tb.run(t, "when done", until(cell+`.dataset.done && !document.querySelector("#send").hidden`), read(&done))
	tb.run(t, "after a reload", chromedp.Reload(), until(cell+`?.dataset.done`), read(&reloaded))
	tb.shot(t, "03-reloaded-1366")
	if updating.Math != 1 || len(updating.Progress) != 1 || len(updating.Items) != 2 {
		t.Errorf("while updating: %+v, want the equation and one progress item", updating)
	}
	if !regexp.MustCompile(`^step [3-7] of 8\n$`).MatchString(clearing.Out) || len(clearing.Items) != 0 {
		t.Errorf("while clearing: %+v, want only the latest line", clearing)
	}
	for when, v := range map[string]view{"done": done, "after a reload": reloaded} {
		if v.Out != "step 7 of 8\nall done\n" || len(v.Items) != 0 || !strings.HasPrefix(v.Status, "done") {
			t.Errorf("%s: %+v, want the last step and the end only", when, v)
		}
	}
	// Without a clear, the equation and the finished progress stay, once each.
	handled := `from IPython.display import display, Math, HTML
h = display(HTML("<b>0 of 3</b>"), display_id="job")
for i in range(1, 4):
    h.update(HTML(f"<b>{i} of 3</b>"))
display(Math("e^{i\\pi} + 1 = 0"))`
	last := `[...document.querySelectorAll("#messages .cell")].find((c) => c.textContent.includes("0 of 3"))`
	var items, bold []string
	var math int
	for _, when := range []string{"live", "after a reload"} {
		if when == "live" {
			tb.run(t, "updates and an equation", say(py(handled)), until(last+`?.dataset.done`))
		} else {
			tb.run(t, "reload", chromedp.Reload(), until(last+`?.dataset.done`))
		}
		tb.run(t, "read it "+when,
			until(last+`.querySelector(".display math")`),
			chromedp.Evaluate(`[...`+last+`.querySelectorAll(".cell-stream > .display")].map((d) => d.getAttribute("aria-label"))`, &items),
			chromedp.Evaluate(`[...`+last+`.querySelectorAll(".display b")].map((b) => b.textContent)`, &bold),
			chromedp.Evaluate(last+`.querySelectorAll(".display math").length`, &math),
		)
		if strings.Join(items, "|") != "Display 1: HTML|Display 2: LaTeX" || strings.Join(bold, "|") != "3 of 3" || math != 1 {
			t.Errorf("%s: items %q, bold %q, %d equations", when, items, bold, math)
		}
	}

	t.Run("a rich value shows its richest form only", func(t *testing.T) {
		richest := `[...document.querySelectorAll("#messages .cell")].find((c) => c.textContent.includes("class Fig"))`
		code := "class Fig:\n    def _repr_mimebundle_(self, include=None, exclude=None):\n        return {'text/html': '<b>fig drawn</b>', 'text/plain': 'Fig()'}\nFig()"
		for _, size := range sizes {
			var text string
			var results int
			if size[0] == sizes[0][0] {
				tb.run(t, "a trailing value with a rich form", chromedp.EmulateViewport(size[0], size[1]), say(py(code)), until(richest+`?.dataset.done`))
			} else {
				tb.run(t, "at 390 px, after a reload", chromedp.EmulateViewport(size[0], size[1]), chromedp.Reload(), until(richest+`?.dataset.done`))
			}
			tb.run(t, "read it",
				until(richest+`.querySelector(".display b")?.textContent === "fig drawn"`),
				chromedp.Evaluate(richest+`.querySelector(".out-wrap").innerText + "\n" + `+richest+`.querySelector(".cell-result").innerText`, &text),
				chromedp.Evaluate(richest+`.querySelectorAll("pre.result").length`, &results),
				chromedp.Evaluate(richest+`.scrollIntoView({ block: "center" }); true`, nil),
			)
			tb.shot(t, fmt.Sprintf("04-richest-%d", size[0]))
			if results != 0 || strings.Contains(text, "Fig()") || !strings.Contains(text, "fig drawn") {
				t.Errorf("at %d px the cell shows its text form too (%d results): %q", size[0], results, text)
			}
		}
		var tableText int
		tb.run(t, "Table() too", chromedp.EmulateViewport(sizes[0][0], sizes[0][1]), say(py("Table()")),
			until(lastCell+`?.dataset.done && `+lastCell+`.querySelector(".display table")`),
			chromedp.Evaluate(`[...`+lastCell+`.querySelectorAll("pre")].filter((p) => p.textContent.includes("Table(sales=42)")).length`, &tableText))
		if tableText != 0 {
			t.Errorf("Table() shows its text under its table")
		}
	})

	t.Run("a stopped turn says so under its answer, above Regenerate, after a reload too", func(t *testing.T) {
		order := `[...document.querySelectorAll("#messages > li")].slice(-3).map((e) => e.matches(".cell") ? "cell" : e.matches(".turn-end") ? "note:" + e.textContent : e.matches(".msg-actions") ? "regenerate" : e.className)`
		var live, reloaded, earlier []string
		tb.run(t, "stop a loop",
			say(py("import time\nwhile True:\n    print('looping', flush=True)\n    time.sleep(0.3)")),
			until(lastCell+`?.querySelector(".cell-out")?.textContent.includes("looping")`),
			press("button", "Stop", ""),
			until(`document.querySelector("#messages > li.msg-actions") && [...document.querySelectorAll("#messages .turn-end")].some((e) => e.textContent === "Stopped.")`),
			chromedp.Evaluate(order, &live),
		)
		tb.shot(t, "05-stopped-live")
		tb.run(t, "reload", chromedp.Reload(), until(`document.querySelector("#messages > li.msg-actions")`), chromedp.Evaluate(order, &reloaded))
		want := "cell|note:Stopped.|regenerate"
		if strings.Join(live, "|") != want || strings.Join(reloaded, "|") != want {
			t.Errorf("the stopped turn's end reads %q live and %q after a reload, want %q", live, reloaded, want)
		}
		// A later turn keeps the earlier one's note where it was.
		tb.run(t, "one more turn, then a reload",
			say(py("print('after the stop')")),
			until(lastCell+`?.querySelector(".cell-out")?.textContent === "after the stop\n" && !document.querySelector("#send").hidden`),
			chromedp.Reload(),
			until(lastCell+`?.dataset.done`),
			chromedp.Evaluate(`[...document.querySelectorAll("#messages .turn-end")].map((e) => e.textContent + (e.previousElementSibling?.matches(".cell") && e.previousElementSibling.textContent.includes("looping") ? " under its cell" : ""))`, &earlier),
		)
		tb.shot(t, "06-earlier-stop-reloaded")
		if strings.Join(earlier, "|") != "Stopped. under its cell" {
			t.Errorf("after a later turn and a reload the notes read %q, want the earlier turn's Stopped. under its cell", earlier)
		}
	})
}
