package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browser starts headless Chromium; tabs opened from the returned context share it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: run `make services` (it installs Debian's chromium)")
	}
	profile, err := os.MkdirTemp("", "sandchat-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.UserDataDir(profile))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx) // closes the browser and waits for it
		cancel()
		cancelAlloc()
		_ = os.RemoveAll(profile)
	})
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// TestBrowserToast is the product's promise, seen in a real browser: flipping "Python
// sandbox" in one tab's Internal tools popup shows the toast in every tab of the user,
// and an agent's TOOLKITS page saves its internal tools.
func TestBrowserToast(t *testing.T) {
	e := newEnv(t)
	m := e.node()
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Analyst", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	base := "http://" + m.Addr()

	root := browser(t)
	tab1, cancel1 := chromedp.NewContext(root)
	defer cancel1()
	tab2, cancel2 := chromedp.NewContext(root)
	defer cancel2()
	// A tab is opened by its first Run, and closed when that Run's context ends: open
	// both with their own long-lived contexts before the timed steps.
	for _, tab := range []context.Context{tab1, tab2} {
		if err := chromedp.Run(tab); err != nil {
			t.Fatalf("open tab: %v", err)
		}
	}
	run := func(tab context.Context, what string, actions ...chromedp.Action) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, 20*time.Second)
		defer cancel()
		if err := chromedp.Run(ctx, actions...); err != nil {
			var html string
			dctx, dcancel := context.WithTimeout(tab, 5*time.Second)
			defer dcancel()
			var png []byte
			_ = chromedp.Run(dctx, chromedp.OuterHTML("html", &html, chromedp.ByQuery), chromedp.CaptureScreenshot(&png))
			if dir := os.Getenv("SANDCHAT_SCREENSHOTS"); dir != "" {
				_ = os.WriteFile(filepath.Join(dir, "failure.png"), png, 0o644)
			}
			t.Fatalf("%s: %v\npage: %.3000s", what, err, html)
		}
	}
	login := []chromedp.Action{
		chromedp.Navigate(base + "/"),
		chromedp.Evaluate(`document.getElementById("token").value = ""`, nil), // tabs share the kept token
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		chromedp.WaitVisible(`#convs li`, chromedp.ByQuery),
	}
	run(tab1, "tab 1 signs in", login...)
	run(tab2, "tab 2 signs in", login...)

	run(tab1, "tab 1 switches the sandbox off in the toolbar",
		chromedp.Click(`#convs li`, chromedp.ByQuery),
		chromedp.WaitEnabled("#tools-button", chromedp.ByID),
		chromedp.WaitReady(`#tools-list li`, chromedp.ByQuery),
		chromedp.Click("#tools-button", chromedp.ByID),
		chromedp.WaitVisible("#tool-pyodide_sandbox", chromedp.ByID),
		chromedp.Click("#tool-pyodide_sandbox", chromedp.ByID),
	)
	const toast = `//div[contains(@class,"toast") and text()="Internal tools configuration updated"]`
	run(tab1, "toast in tab 1", chromedp.WaitVisible(toast, chromedp.BySearch))
	run(tab2, "toast in tab 2", chromedp.WaitVisible(toast, chromedp.BySearch))
	if st := alice.tool(conv, "pyodide_sandbox"); st.Enabled || st.Source != "conversation" {
		t.Fatalf("after the click: %+v", st)
	}
	var shot []byte
	run(tab1, "screenshot", chromedp.CaptureScreenshot(&shot))
	if dir := os.Getenv("SANDCHAT_SCREENSHOTS"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "toolbar-toast.png"), shot, 0o644)
	}

	run(tab2, "tab 2 saves the agent's internal tools on its TOOLKITS page",
		chromedp.Click("#nav-agents", chromedp.ByID),
		chromedp.Click(`#agents li`, chromedp.ByQuery),
		chromedp.WaitVisible("#agent-tool-pyodide_sandbox", chromedp.ByID),
		chromedp.Click("#show-all", chromedp.ByID),
		chromedp.WaitVisible("#agent-tool-swarm_mode", chromedp.ByID),
		chromedp.Click("#agent-tool-swarm_mode", chromedp.ByID),
		chromedp.Click("#agent-save", chromedp.ByID),
		chromedp.WaitVisible(`//div[contains(@class,"toast") and text()="Agent saved"]`, chromedp.BySearch),
	)
	var saved agentJSON
	alice.must(200, "GET", fmt.Sprintf("/api/v1/agents/%d", agent.ID), nil, &saved)
	if !saved.InternalTools["swarm_mode"] || !saved.InternalTools["pyodide_sandbox"] || saved.Version != agent.Version+1 {
		t.Fatalf("saved %+v", saved)
	}
}
