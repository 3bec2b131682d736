package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserStorage: the Files panel says what the conversation holds against its
// quota, and follows an upload.
func TestBrowserStorage(t *testing.T) {
	m := newEnv(t).node(func(c *Config, _ *Main) { c.ConversationQuota = 8 << 20 })
	alice, _ := m.user(t, "alice", false)
	conv := alice.createConversation(0)
	if code, body := alice.uploadAt(conv, "input.bin", "", strings.Repeat("x", 2<<20)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	base := "http://" + m.Addr()
	tb := openTab(t, browser(t), "alice", screenshotDir(t))
	storage := func(text string) chromedp.Action {
		return until(fmt.Sprintf(`document.querySelector("#files-storage").textContent === %s`, jsString(text)))
	}
	tb.run(t, "sign in and open the files",
		chromedp.EmulateViewport(1366, 850),
		chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, conv)),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(`document.querySelector("#conv-title").textContent === "test" && !document.querySelector("#files-button").disabled`),
		chromedp.Click("#files-button", chromedp.ByID),
		chromedp.WaitVisible("#files-panel", chromedp.ByID),
		storage("Storage: 2 MiB of 8 MiB"),
	)
	tb.shot(t, "01-storage")
	// An upload made elsewhere (another tab, the API) shows when the panel is next drawn.
	alice.uploadAt(conv, "more.bin", "", strings.Repeat("y", 3<<19))
	tb.run(t, "at 390 px, after another upload",
		chromedp.EmulateViewport(390, 844),
		chromedp.Reload(),
		until(`document.querySelector("#conv-title").textContent === "test" && !document.querySelector("#files-button").disabled`),
		chromedp.Click("#files-button", chromedp.ByID),
		chromedp.WaitVisible("#files-panel", chromedp.ByID),
		storage("Storage: 3.5 MiB of 8 MiB"),
	)
	tb.shot(t, "02-storage-phone")

	// Small amounts are told in bytes, not as "0 MiB".
	small := alice.createConversation(0)
	if code, body := alice.uploadAt(small, "tiny.csv", "", strings.Repeat("z", 66)); code != 201 {
		t.Fatalf("upload: %d %s", code, body)
	}
	tb.run(t, "a conversation with 66 bytes",
		chromedp.Navigate(fmt.Sprintf("%s/#/c/%d", base, small)),
		chromedp.Reload(), // the list of conversations is read anew, with this one
		until(fmt.Sprintf(`document.querySelector('#convs [data-conv="%d"][aria-current]') && !document.querySelector("#files-button").disabled`, small)),
		chromedp.Click("#files-button", chromedp.ByID),
		chromedp.WaitVisible("#files-panel", chromedp.ByID),
		storage("Storage: 66 B of 8 MiB"),
		until(`document.querySelector('#files-list .file small')?.textContent === "upload · 66 B"`),
	)
}
