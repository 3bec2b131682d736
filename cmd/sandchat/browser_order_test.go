package main

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserStreamOrder: a cell shows stdout, stderr and display items in the order
// they were written, live and after a reload (the run's record keeps the order), the
// two streams told apart by colour; so also for output that alternates faster than the
// sandbox sends it.
func TestBrowserStreamOrder(t *testing.T) {
	tb, _, _, _ := browserConversation(t)
	// parts is a JS expression: what the cell whose code holds tag shows, in order, as
	// [what, text]: "stdout" or "stderr" for printed text, "item" for a display item.
	parts := func(tag string) string {
		return fmt.Sprintf(`(() => { const c = [...document.querySelectorAll("#messages .cell")].find((c) => c.querySelector(".cell-code").textContent.includes(%s)), out = [];
  for (const p of c.querySelector(".cell-stream").children) {
    if (p.matches(".display")) out.push(["item", p.innerText.trim()]);
    else for (const s of p.children) {
      const last = out[out.length - 1], what = s.classList.contains("stderr") ? "stderr" : "stdout";
      if (last && last[0] === what) last[1] += s.textContent; else out.push([what, s.textContent]);
    }
  }
  return out })()`, jsString(tag))
	}
	colours := `(() => { const c = [...document.querySelectorAll("#messages .cell-out")].pop();
  return [getComputedStyle(c.querySelector(".stdout")).color, getComputedStyle(c.querySelector(".stderr")).color] })()`
	done := func(tag string) chromedp.Action {
		return until(fmt.Sprintf(`[...document.querySelectorAll("#messages .cell")].find((c) => c.querySelector(".cell-code").textContent.includes(%s))?.dataset.done && !document.querySelector("#send").hidden`, jsString(tag)))
	}
	cases := []struct {
		name, tag, code string
		want            [][2]string
	}{
		{
			name: "written with pauses, an item between", tag: "order o1",
			code: "import sys, time\nfrom IPython.display import HTML\nprint('order o1', flush=True)\ntime.sleep(0.2)\nprint('order e1', file=sys.stderr, flush=True)\ntime.sleep(0.2)\n" +
				"display(HTML('<b>order item</b>'))\nprint('order o2', flush=True)\ntime.sleep(0.2)\nprint('order e2', file=sys.stderr, flush=True)\ntime.sleep(0.2)\nprint('order o3')",
			want: [][2]string{{"stdout", "order o1\n"}, {"stderr", "order e1\n"}, {"item", "order item"}, {"stdout", "order o2\n"}, {"stderr", "order e2\n"}, {"stdout", "order o3\n"}},
		},
		{
			name: "alternating faster than it is sent", tag: "fast o",
			code: "import sys\nfor i in range(3):\n    print(f'fast o{i}')\n    print(f'fast e{i}', file=sys.stderr)",
			want: [][2]string{{"stdout", "fast o0\n"}, {"stderr", "fast e0\n"}, {"stdout", "fast o1\n"}, {"stderr", "fast e1\n"}, {"stdout", "fast o2\n"}, {"stderr", "fast e2\n"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got [][2]string
			var colour [2]string
			for _, when := range []string{"live", "after a reload"} {
				if when == "live" {
					tb.run(t, "run it", say(py(c.code)), done(c.tag), chromedp.Evaluate(parts(c.tag), &got), chromedp.Evaluate(colours, &colour))
				} else {
					tb.run(t, "reload", chromedp.Reload(), done(c.tag), chromedp.Evaluate(parts(c.tag), &got), chromedp.Evaluate(colours, &colour))
				}
				if fmt.Sprint(got) != fmt.Sprint(c.want) || colour[0] == colour[1] {
					t.Errorf("%s the cell shows %q, stdout in %s and stderr in %s: want %q, two colours", when, got, colour[0], colour[1], c.want)
				}
			}
		})
	}
	tb.shot(t, "01-order")
}
