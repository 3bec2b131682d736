package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserDisplay: display items of a turn render in the chat as they stream, the
// HTML sanitized (an onerror handler and a script are removed and never run) and the
// image loaded from its stored file.
func TestBrowserDisplay(t *testing.T) {
	m, alice, _ := newEnv(t).coder()
	base := "http://" + m.Addr()
	tab, cancel := chromedp.NewContext(browser(t))
	defer cancel()
	ctx, cancelRun := context.WithTimeout(tab, 150*time.Second)
	defer cancelRun()
	if err := chromedp.Run(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		chromedp.WaitVisible(`#convs li`, chromedp.ByQuery),
		chromedp.Click(`#convs li`, chromedp.ByQuery),
		chromedp.WaitEnabled("#send", chromedp.ByID),
	); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	code := richClasses + `
class Hostile:
    def _repr_html_(self):
        return '<b id="bold">safe</b><img src="x" onerror="window.pwned=1"><script>window.pwned=2</script>'
display(Table())
display(Picture())
display(Hostile())`
	// The composer sends what it holds; set it directly (SendKeys would type 1 KB slowly).
	var width int
	var pwned, onerror bool
	var cell string
	err := chromedp.Run(ctx,
		chromedp.SetValue("#input", "Show:\n"+py(code), chromedp.ByID),
		chromedp.Click("#send", chromedp.ByID),
	)
	if err == nil {
		wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
		err = chromedp.Run(wctx, chromedp.WaitVisible(`.display td`, chromedp.ByQuery))
		wcancel()
	}
	if err == nil {
		err = chromedp.Run(ctx,
			chromedp.WaitVisible(`#bold`, chromedp.ByQuery),
			chromedp.Poll(`(() => { const i = document.querySelector(".display img[alt='display-1.png']"); return i && i.complete && i.naturalWidth > 0; })()`, nil, chromedp.WithPollingTimeout(30*time.Second)),
			chromedp.Evaluate(`document.querySelector(".display img[alt='display-1.png']").naturalWidth`, &width),
			chromedp.Evaluate(`window.pwned !== undefined`, &pwned),
			chromedp.Evaluate(`!!document.querySelector(".display [onerror], .display script")`, &onerror),
			chromedp.Text(`.display td`, &cell, chromedp.ByQuery),
		)
	}
	if err != nil {
		var html string
		_ = chromedp.Run(ctx, chromedp.OuterHTML("#messages", &html, chromedp.ByQuery))
		t.Fatalf("display items: %v\n%.2000s", err, html[max(0, len(html)-2000):])
	}
	if width != 12 || pwned || onerror || strings.TrimSpace(cell) != "sales" {
		t.Fatalf("image width %d, script ran %v, handler kept %v, cell %q", width, pwned, onerror, cell)
	}
}
