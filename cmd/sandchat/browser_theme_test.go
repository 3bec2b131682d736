package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

// contrastJS is a JS function of a root and a name: each text of the root (an element
// with text of its own, shown, not part of a disabled control) whose colour against what
// is drawn under it is below WCAG AA's 4.5:1, as "name: text: ratio".
const contrastJS = `(root, name) => {
  const parse = (c) => { const m = c.match(/rgba?\(([^)]+)\)/); if (!m) return null; const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p[3] ?? 1]; };
  const over = (a, b) => [0, 1, 2].map((i) => a[i] * a[3] + b[i] * (1 - a[3])).concat(1);
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }; return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const under = (e) => {
    const layers = [];
    for (let x = e; x; x = x.parentElement) {
      const b = parse(getComputedStyle(x).backgroundColor);
      if (b && b[3] > 0) { layers.push(b); if (b[3] >= 1) break; }
    }
    let c = [255, 255, 255, 1]; // a frame's or page's canvas is white unless something says otherwise
    if (!layers.length || layers[layers.length - 1][3] < 1) c = matchMedia("(prefers-color-scheme: dark)").matches && !document.documentElement.dataset.theme || document.documentElement.dataset.theme === "dark" ? [18, 18, 18, 1] : c;
    for (const l of layers.reverse()) c = over(l, c);
    return c;
  };
  const out = [];
  for (const e of root.querySelectorAll("*")) {
    const text = [...e.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join("").trim();
    if (!text || !e.checkVisibility({ opacityProperty: false, visibilityProperty: true }) || e.closest(":disabled, [aria-disabled=true], .sr-only, math, svg")) continue;
    let opacity = 1;
    for (let x = e; x; x = x.parentElement) opacity *= Number(getComputedStyle(x).opacity);
    const bg = under(e), fg0 = parse(getComputedStyle(e).color);
    if (!fg0) continue;
    const fg = over([fg0[0], fg0[1], fg0[2], fg0[3] * opacity], bg);
    const l1 = lum(fg), l2 = lum(bg), ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    if (ratio < 4.5) out.push(name + ": " + text.slice(0, 40) + ": " + ratio.toFixed(2));
  }
  return out;
}`

// TestBrowserTheme: the page follows the system's light or dark scheme, and a Theme
// setting (kept in the browser) overrides it; in each, code, outputs, tables, display
// frames, toasts and the table preview are readable: every text against what is drawn
// under it reaches WCAG AA's 4.5:1.
func TestBrowserTheme(t *testing.T) {
	tb, alice, conv, _ := browserConversation(t)
	tb.allow("the server responded with a status of 400") // the rename to nothing, refused on purpose
	if r := alice.run(conv, sandboxtest.RichDisplay); r.Status != "success" {
		t.Fatalf("setup: %+v", r)
	}
	if code := alice.upload(conv, "sales.csv", "region,amount,note\nnorth,12.5,first\nsouth,7,\n"); code != 201 {
		t.Fatalf("upload: %d", code)
	}
	code := `import sys
# a comment, a string and numbers
total = sum([1, 2, 3])
print("stdout line", total)
print("stderr line", file=sys.stderr)
display(Table())
from IPython.display import HTML
display(HTML("<style>td{padding:4px}</style><table><thead><tr><th>city</th><th>n</th></tr></thead><tbody><tr><td>Oslo</td><td>3</td></tr></tbody></table>"))
1 / 0`
	tb.run(t, "a cell with code, output, tables, a frame and an error",
		chromedp.Reload(), // the upload, made over the API, is shown once the page reads its files
		until(`document.querySelector("#conv-title").textContent === "test"`),
		say(py(code)),
		until(lastCell+`?.dataset.done && `+lastCell+`.querySelector("iframe.display-frame") && `+lastCell+`.querySelector(".error-box")`),
		until(`document.querySelectorAll("#attachments .chip-row").length === 1`),
	)
	check := func(t *testing.T, mode string, scheme string, setting string, size [2]int64) {
		var failures []string
		tb.run(t, mode,
			chromedp.EmulateViewport(size[0], size[1]),
			emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}),
			// As a person picks it in the header's Theme.
			chromedp.Evaluate(fmt.Sprintf(`(() => { const s = document.querySelector("#theme"); s.value = %q; s.dispatchEvent(new Event("change")); return true })()`, setting), nil),
			until(fmt.Sprintf(`document.querySelector("#theme").selectedOptions[0]?.value === %q`, setting)),
			until(narrow),
			chromedp.Evaluate(`(() => { const c = `+contrastJS+`; return [...c(document.querySelector("#messages"), "messages"), ...c(document.querySelector("header.top"), "header"), ...c(document.querySelector("#composer"), "composer")] })()`, &failures),
		)
		// A toast of each kind: a success, and an error (a rename to nothing).
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/data_analysis", conv), map[string]any{"enabled": true}, nil)
		var more []string
		tb.run(t, mode+": toasts",
			until(hasToast("Internal tools configuration updated")),
			press("button", "Rename", ""),
			chromedp.SetValue("#rename-input", " ", chromedp.ByID),
			chromedp.Evaluate(`document.querySelector("#rename-form").requestSubmit(); true`, nil),
			until(`document.querySelector(".toast.error")`),
			chromedp.Evaluate(`(`+contrastJS+`)(document.querySelector("#toasts"), "toasts")`, &more),
			chromedp.Evaluate(`document.querySelector("#rename-cancel").click(); true`, nil),
		)
		failures = append(failures, more...)
		tb.shot(t, fmt.Sprintf("%s-%d", strings.ReplaceAll(mode, " ", "-"), size[0]))
		tb.run(t, mode+": the preview",
			press("button", "Preview sales.csv", "#attachments"),
			until(`document.querySelector("dialog.preview")?.open && document.querySelectorAll("dialog.preview tbody tr").length === 2`),
			chromedp.Evaluate(`(`+contrastJS+`)(document.querySelector("dialog.preview"), "preview")`, &more),
		)
		failures = append(failures, more...)
		tb.shot(t, fmt.Sprintf("%s-preview-%d", strings.ReplaceAll(mode, " ", "-"), size[0]))
		tb.run(t, "close it", press("button", "Close", "dialog.preview"), until(`!document.querySelector("dialog.preview").open`))
		want := "light"
		if setting == "dark" || setting == "" && scheme == "dark" {
			want = "dark"
		}
		answer := frameEval(t, tb, `"theme=" + document.documentElement.dataset.theme + " " + JSON.stringify((`+contrastJS+`)(document, "frame"))`, "theme="+want)
		var inFrame []string
		if !strings.HasPrefix(answer, "theme="+want+" ") || json.Unmarshal([]byte(strings.TrimPrefix(answer, "theme="+want+" ")), &inFrame) != nil {
			t.Errorf("%s: the display frame answers %q, want its text in the %s theme", mode, answer, want)
		}
		failures = append(failures, inFrame...)
		var bg string
		tb.run(t, mode+": the page's colours", chromedp.Evaluate(`getComputedStyle(document.body).backgroundColor`, &bg))
		if dark := bg == "rgb(17, 20, 24)"; dark != (want == "dark") {
			t.Errorf("%s: the page's background is %s, want it %s", mode, bg, want)
		}
		if len(failures) > 0 {
			t.Errorf("%s at %d px: below 4.5:1:\n%s", mode, size[0], strings.Join(failures, "\n"))
		}
	}
	check(t, "light system", "light", "", sizes[0])
	check(t, "dark system", "dark", "", sizes[0])
	check(t, "dark system at phone width", "dark", "", sizes[1])
	check(t, "dark setting on a light system", "light", "dark", sizes[0])
	check(t, "light setting on a dark system", "dark", "light", sizes[1])
	var kept string
	tb.run(t, "the setting is kept across a reload",
		chromedp.Reload(),
		until(`document.querySelector("#theme").value === "light" && document.documentElement.dataset.theme === "light"`),
		chromedp.Evaluate(`localStorage.getItem("sandchat.theme")`, &kept),
	)
	if kept != "light" {
		t.Errorf("kept %q", kept)
	}
}
