package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserPreview: an attachment that is a table offers Preview on its chip and in the
// Files panel; the preview shows its first rows with each column's type in the header,
// a workbook's sheets as tabs, and a formula-like cell as plain text.
func TestBrowserPreview(t *testing.T) {
	m := newEnv(t).node()
	alice, _ := m.user(t, "alice", false)
	conv := alice.createConversation(0)
	csv := "id,link,day\n1,\"=HYPERLINK(\"\"http://evil.example\"\",\"\"click\"\")\",2024-01-15\n2,plain,2024-02-01\n"
	for name, content := range map[string]string{"sales.csv": csv, "book.xlsx": salesXLSX(t), "notes.txt": "not a table\n"} {
		if code := alice.upload(conv, name, content); code != 201 {
			t.Fatalf("upload %s: %d", name, code)
		}
	}
	tb := openTab(t, browser(t), "tab", screenshotDir(t))
	tb.run(t, "sign in",
		chromedp.EmulateViewport(1366, 850),
		chromedp.Navigate(fmt.Sprintf("http://%s/#/c/%d", m.Addr(), conv)),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(`document.querySelector("#conv-title").textContent === "test" && document.querySelectorAll("#attachments .chip-row").length === 3`),
		until(socketOpen),
	)
	tb.run(t, "Data analysis is in the toolbar popup like any tool, with its toast",
		chromedp.Click("#tools-button", chromedp.ByID),
		until(`document.querySelector("#tool-data_analysis")?.getAttribute("aria-checked") === "false"`),
		chromedp.Click("#tool-data_analysis", chromedp.ByID),
		until(`document.querySelector("#tool-data_analysis").getAttribute("aria-checked") === "true"`),
		until(hasToast("Internal tools configuration updated")),
		chromedp.Click("#tools-button", chromedp.ByID),
		until(`document.querySelector("#tools-popup").hidden`),
	)
	if st := alice.tool(conv, "data_analysis"); !st.Enabled || st.Source != "conversation" {
		t.Fatalf("after the switch: %+v", st)
	}
	var offered int
	tb.run(t, "only tables offer a preview", count("button", "Preview notes.txt", "#attachments", &offered))
	if offered != 0 {
		t.Errorf("notes.txt offers a preview")
	}
	type shown struct {
		Head  []string
		Cells []string
		Links int
		Tabs  []string
		Info  string
	}
	read := `(() => { const d = document.querySelector("dialog.preview"); return {
		head: [...d.querySelectorAll("th")].map((th) => th.textContent),
		cells: [...d.querySelectorAll("tbody tr:first-child td")].map((td) => td.textContent),
		links: d.querySelectorAll("a").length,
		tabs: [...d.querySelectorAll("[role=tab]")].filter((b) => b.offsetParent).map((b) => b.textContent + (b.getAttribute("aria-selected") === "true" ? "*" : "")),
		info: d.querySelector(".preview-info").textContent } })()`
	var got shown
	tb.run(t, "preview the CSV from its chip",
		// The switch just made redraws the chips (its event may land after the popup
		// closed): a press on a chip redrawn under the pointer is pressed again.
		chromedp.ActionFunc(func(ctx context.Context) error {
			for try := 0; ; try++ {
				if err := press("button", "Preview sales.csv", "#attachments").Do(ctx); err != nil {
					return err
				}
				open := false
				var err error
				poll(3*time.Second, func() bool {
					err = chromedp.Evaluate(`!!document.querySelector("dialog.preview")?.open`, &open).Do(ctx)
					return err != nil || open
				})
				if err != nil || open || try == 4 {
					return err
				}
			}
		}),
		until(`document.querySelector("dialog.preview")?.open && document.querySelectorAll("dialog.preview tbody tr").length === 2`),
		chromedp.Evaluate(read, &got),
	)
	tb.shot(t, "01-preview-csv")
	if strings.Join(got.Head, "|") != "idinteger|linktext|daydate" || got.Cells[1] != `=HYPERLINK("http://evil.example","click")` || got.Links != 0 || len(got.Tabs) != 0 ||
		!strings.HasPrefix(got.Info, "2 rows × 3 columns") {
		t.Fatalf("CSV preview %+v", got)
	}
	tb.run(t, "close it and preview the workbook from the Files panel",
		press("button", "Close", "dialog.preview"),
		until(`!document.querySelector("dialog.preview").open`),
		press("button", "Files (3)", ""),
		chromedp.WaitVisible("#files-panel", chromedp.ByID),
		until(`document.querySelector('#files-list button[aria-label="Preview book.xlsx"]') !== null`),
		press("button", "Preview book.xlsx", "#files-list"),
		until(`document.querySelector("dialog.preview").open && document.querySelector("dialog.preview .preview-title").textContent === "book.xlsx"`),
		chromedp.Evaluate(read, &got),
	)
	tb.shot(t, "02-preview-xlsx")
	if strings.Join(got.Tabs, ",") != "Orders*,Notes" || strings.Join(got.Head, "|") != "daydate|amountfloat" || got.Cells[0] != "2024-05-01" {
		t.Fatalf("workbook preview %+v", got)
	}
	tb.run(t, "its second sheet",
		press("tab", "Notes", "dialog.preview"),
		until(`[...document.querySelectorAll("dialog.preview th")].map((th) => th.textContent).join() === "noteempty"`),
		chromedp.Evaluate(read, &got),
	)
	if strings.Join(got.Tabs, ",") != "Orders,Notes*" {
		t.Fatalf("tabs after choosing Notes: %+v", got)
	}

	tb.run(t, "close it", press("button", "Close", "dialog.preview"), until(`!document.querySelector("dialog.preview").open`))

	// The model's describe_file shows as its summary with Preview, not as a code cell,
	// live and after a reload.
	result := `document.querySelector("#messages .data-result")`
	check := chromedp.Tasks{
		until(result + `?.textContent.includes("sales.csv: CSV") && ` + result + `.textContent.includes("id (integer): 1 to 2")`),
		until(`!document.querySelector("#messages .cell") && document.querySelectorAll("#messages .data-result").length === 1`),
		until(`[...document.querySelectorAll("#messages .msg.assistant")].some((m) => m.textContent.includes("=HYPERLINK(")) && !document.querySelector("#messages a[href*='evil']")`),
	}
	tb.run(t, "ask about a file", say("What is in sales.csv?"), check)
	tb.shot(t, "03-describe-in-chat")
	tb.run(t, "after a reload", chromedp.Reload(), check,
		press("button", "Preview sales.csv", "#messages"),
		until(`document.querySelector("dialog.preview").open && document.querySelector("dialog.preview .preview-title").textContent === "sales.csv"`),
	)
}
