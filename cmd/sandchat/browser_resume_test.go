package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// tickingCell is Python that prints "<tag> line N" every half second, n times: long
// enough to reload or switch chats in the middle of it.
func tickingCell(tag string, n int) string {
	return fmt.Sprintf("```python\nimport time\nfor i in range(%d):\n    print('%s line', i, flush=True)\n    time.sleep(0.5)\n```", n, tag)
}

// cellOf is a JS expression for the cell whose code holds tag.
func cellOf(tag string) string {
	return fmt.Sprintf(`[...document.querySelectorAll("#messages .cell")].find((c) => c.querySelector(".cell-code").textContent.includes(%s))`, jsString("'"+tag+" line'"))
}

// linesOf is a JS expression: the numbers of the lines the cell of tag shows, in order.
func linesOf(tag string) string {
	return fmt.Sprintf(`[...(%s).querySelector(".cell-out").textContent.matchAll(/%s line (\d+)/g)].map((m) => Number(m[1]))`, cellOf(tag), tag)
}

// TestBrowserResume: a reload, or a switch to another chat and back, in the middle of a
// run picks the cell up where it is: running, with the output printed so far, then the
// lines printed after, and it ends as a success with every line once, with no second
// reload.
func TestBrowserResume(t *testing.T) {
	e := newEnv(t)
	m := e.sandboxNode()
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Analyst", "model": "builtin", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	other := alice.createConversation(agent.ID)
	alice.must(200, "PATCH", fmt.Sprintf("/api/v1/conversations/%d", other), map[string]any{"title": "other"}, nil)
	base := "http://" + m.Addr()
	dir := screenshotDir(t)
	tb := openTab(t, browser(t), "alice", dir)
	tb.run(t, "sign in",
		chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(`document.querySelector("#conv-title").textContent === "test" && !document.querySelector("#input").disabled`),
	)
	const n = 16
	for i, how := range []struct {
		name  string
		leave chromedp.Action
	}{
		{"reload", chromedp.Reload()},
		{"switch", chromedp.Tasks{
			chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"`, other), nil),
			until(`document.querySelector("#conv-title").textContent === "other" && !document.querySelector("#messages .cell")`),
			chromedp.Evaluate(fmt.Sprintf(`location.hash = "#/c/%d"`, conv), nil),
		}},
	} {
		t.Run(how.name, func(t *testing.T) {
			tag := how.name
			cell, lines := cellOf(tag), linesOf(tag)
			tb.run(t, "start a run and wait for its first lines",
				say(tickingCell(tag, n)),
				until(fmt.Sprintf(`%s.length >= 2 && !%s.dataset.done`, lines, cell)),
			)
			var before []int
			tb.run(t, how.name+" in the middle of it", chromedp.Evaluate(lines, &before), how.leave)
			var so []int
			tb.run(t, "the cell runs on with the output so far",
				until(fmt.Sprintf(`document.querySelector("#conv-title").textContent === "test" && %s && !%s.dataset.done && %s.querySelector(".status").textContent === "running…" && %s.length >= %d`,
					cell, cell, cell, lines, len(before))),
				chromedp.Evaluate(lines, &so),
				until(`!document.querySelector("#stop").hidden && document.querySelector("#send").hidden`),
			)
			if len(so) == n {
				t.Fatalf("the page showed the cell only once it had printed every line: %v", so)
			}
			tb.shot(t, fmt.Sprintf("%02d-%s-resumed", 2*i+1, tag))
			tb.run(t, "live lines keep coming while it runs",
				until(fmt.Sprintf(`%s.length > %d && !%s.dataset.done`, lines, len(so), cell)),
			)
			var end struct {
				Lines  []int  `json:"lines"`
				Status string `json:"status"`
			}
			tb.run(t, "it ends as a success with every line once",
				until(fmt.Sprintf(`%s.dataset.done && !document.querySelector("#send").hidden`, cell)),
				chromedp.Evaluate(fmt.Sprintf(`({ lines: %s, status: %s.querySelector(".status").textContent })`, lines, cell), &end),
			)
			tb.shot(t, fmt.Sprintf("%02d-%s-done", 2*i+2, tag))
			want := make([]int, n)
			for k := range want {
				want[k] = k
			}
			if fmt.Sprint(end.Lines) != fmt.Sprint(want) || !strings.HasPrefix(end.Status, "done") {
				t.Errorf("the cell ends %q with lines %v, want done with %v", end.Status, end.Lines, want)
			}
			if len(so) == 0 || so[0] != 0 {
				t.Errorf("after the %s the cell showed lines %v, not the output so far (from line 0)", how.name, so)
			}
		})
	}
}
