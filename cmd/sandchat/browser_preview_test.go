package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/xuri/excelize/v2"
)

// longXLSX is a workbook of two sheets: 45 rows of numbers, and a note with a formula
// saved without its value (as programs that do not compute formulas write them).
func longXLSX(t *testing.T) string {
	t.Helper()
	f := excelize.NewFile()
	defer f.Close()
	f.SetSheetName("Sheet1", "Orders")
	f.SetSheetRow("Orders", "A1", &[]any{"n", "square"})
	for i := 1; i <= 45; i++ {
		f.SetSheetRow("Orders", fmt.Sprintf("A%d", i+1), &[]any{i, i * i})
	}
	f.NewSheet("Notes")
	f.SetSheetRow("Notes", "A1", &[]any{"note", "total"})
	f.SetSheetRow("Notes", "A2", &[]any{"sum"})
	if err := f.SetCellFormula("Notes", "B2", "SUM(Orders!B2:B46)"); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := f.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

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

	t.Run("sheets are tabs as the ARIA pattern has them; rows page; a formula without its value is said", func(t *testing.T) {
		if code := alice.upload(conv, "long.xlsx", longXLSX(t)); code != 201 {
			t.Fatalf("upload: %d", code)
		}
		type state struct {
			Focus    string  `json:"focus"`
			Selected string  `json:"selected"`
			Stops    int     `json:"stops"`
			Head     string  `json:"head"`
			Rows     string  `json:"rows"`
			Height   float64 `json:"height"`
			Notes    string  `json:"notes"`
			Next     bool    `json:"next"`
			Width    float64 `json:"width"`
		}
		read := `(() => { const d = document.querySelector("dialog.preview"), a = document.activeElement; return {
  focus: (a.getAttribute("role") || a.tagName.toLowerCase()) + ":" + a.textContent,
  selected: [...d.querySelectorAll("[role=tab]")].filter((t) => t.getAttribute("aria-selected") === "true").map((t) => t.textContent).join(),
  stops: [...d.querySelectorAll("[role=tab]")].filter((t) => t.tabIndex === 0).length,
  head: [...d.querySelectorAll("th")].map((th) => th.firstChild.textContent).join(),
  rows: d.querySelector(".preview-rows").textContent, height: d.getBoundingClientRect().height,
  notes: [...d.querySelectorAll(".preview-note")].map((n) => n.textContent).join(" "),
  next: d.querySelector(".preview-pager button:last-child").disabled, width: d.getBoundingClientRect().right } })()`
		for _, size := range sizes {
			var orders, notes, back, page2, page3 state
			tb.run(t, fmt.Sprintf("at %d px: open it, on its first sheet's tab", size[0]),
				chromedp.EmulateViewport(size[0], size[1]),
				chromedp.Reload(),
				until(`[...document.querySelectorAll("#attachments .chip")].some((c) => c.textContent.includes("long.xlsx"))`),
				press("button", "Preview long.xlsx", "#attachments"),
				until(`document.querySelector("dialog.preview")?.open && document.querySelector(".preview-rows")?.textContent === "Rows 1–20 of 45"`),
				chromedp.Focus(`dialog.preview [role=tab][aria-selected=true]`, chromedp.ByQuery),
				chromedp.Evaluate(read, &orders),
			)
			tb.run(t, "→ shows the next sheet, the focus on its tab",
				chromedp.KeyEvent(kb.ArrowRight),
				until(`document.querySelector("dialog.preview th")?.firstChild.textContent === "note"`),
				chromedp.Evaluate(read, &notes),
			)
			tb.shot(t, fmt.Sprintf("04-tabs-%d", size[0]))
			tb.run(t, "← goes back",
				chromedp.KeyEvent(kb.ArrowLeft),
				until(`document.querySelector("dialog.preview th")?.firstChild.textContent === "n"`),
				chromedp.Evaluate(read, &back),
			)
			tb.run(t, "Next rows, twice",
				press("button", "Next rows", "dialog.preview"),
				until(`document.querySelector(".preview-rows").textContent === "Rows 21–40 of 45"`),
				chromedp.Evaluate(read, &page2),
				press("button", "Next rows", "dialog.preview"),
				until(`document.querySelector(".preview-rows").textContent === "Rows 41–45 of 45"`),
				chromedp.Evaluate(read, &page3),
			)
			tb.shot(t, fmt.Sprintf("05-paged-%d", size[0]))
			tb.run(t, "close it", chromedp.KeyEvent(kb.Escape), until(`!document.querySelector("dialog.preview").open`))
			if orders.Focus != "tab:Orders" || orders.Stops != 1 || orders.Selected != "Orders" {
				t.Errorf("at %d px on open: %+v", size[0], orders)
			}
			if notes.Focus != "tab:Notes" || notes.Selected != "Notes" || notes.Stops != 1 || back.Focus != "tab:Orders" || back.Selected != "Orders" {
				t.Errorf("at %d px the arrows: %+v, then %+v; want the focus on the selected tab", size[0], notes, back)
			}
			if notes.Height != orders.Height || page3.Height != orders.Height {
				t.Errorf("at %d px the dialog is %v, %v and %v px high for the two sheets and the last page", size[0], orders.Height, notes.Height, page3.Height)
			}
			if !strings.Contains(notes.Notes, "The formula in B2 has no saved value") {
				t.Errorf("at %d px the sheet's notes read %q", size[0], notes.Notes)
			}
			if !page3.Next || page3.Focus != "button:‹ Previous" || page2.Focus != "button:Next ›" {
				t.Errorf("at %d px paging: %+v then %+v; want Next off at the end, its focus handed to Previous", size[0], page2, page3)
			}
			if orders.Width > float64(size[0]) {
				t.Errorf("at %d px the dialog ends at %v", size[0], orders.Width)
			}
		}
		tb.run(t, "back to the first size", chromedp.EmulateViewport(sizes[0][0], sizes[0][1]))
	})

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
	// The answer tells of the columns: the result above it says what the file is, and
	// keeps its whole summary a click away, so the reader meets it once.
	var onScreen string
	tb.run(t, "the summary shows once", chromedp.Evaluate(`document.querySelector("#messages").innerText`, &onScreen))
	if n := strings.Count(onScreen, "id (integer): 1 to 2"); n != 1 {
		t.Errorf("the page shows the column's summary %d times, want once", n)
	}
	tb.run(t, "after a reload", chromedp.Reload(), check,
		press("button", "Preview sales.csv", "#messages"),
		until(`document.querySelector("dialog.preview").open && document.querySelector("dialog.preview .preview-title").textContent === "sales.csv"`),
	)
}
