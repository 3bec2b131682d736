package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
)

// logBuffer keeps what a server logged, for a test to read while it runs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// readableDir is a temporary directory session processes can read: they may run as
// another user.
func readableDir(t *testing.T) string {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// offlinePackages gives a node's engine the distribution's lock file and a package
// source nobody answers at (the port was free a moment ago), as a server without
// internet that was left on the official CDN has; what the node logs goes to logs too.
func offlinePackages(t *testing.T, logs io.Writer) func(*Config, *Main) {
	return func(c *Config, m *Main) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.Sandbox.Engine.PackageCDN = "http://" + l.Addr().String() + "/pyodide/"
		l.Close()
		c.Sandbox.Engine.PackageCacheDir = readableDir(t)
		m.Log = slog.New(slog.NewTextHandler(io.MultiWriter(tlog{t}, logs), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
}

// TestBrowserPackagesOffline: on a server that cannot fetch packages, what a user reads
// in the cell is short and theirs. `from IPython.display import HTML, display` needs no
// package (the sandbox's own shim provides it): the cell draws its item and says nothing
// about packages. `import pandas` fails with one short line, once: what is missing, that
// this server cannot fetch packages, whom to ask; the settings that fix it are the
// operator's, in the server's log. The API's error is as short.
func TestBrowserPackagesOffline(t *testing.T) {
	e := newEnv(t)
	var logs logBuffer
	m := e.sandboxNode(offlinePackages(t, &logs))
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Analyst", "model": "builtin", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	tb := openTab(t, browser(t), "alice", screenshotDir(t))
	tb.run(t, "sign in",
		chromedp.EmulateViewport(1366, 850),
		chromedp.Navigate(fmt.Sprintf("http://%s/#/c/%d", m.Addr(), conv)),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", alice.token, chromedp.ByID),
		chromedp.Click("#login button", chromedp.ByQuery),
		until(`document.querySelector("#conv-title").textContent === "test" && !document.querySelector("#input").disabled`),
	)
	// What the user reads in the cell whose code holds tag.
	type cellView struct {
		Status string `json:"status"`
		Text   string `json:"text"`
		Stderr string `json:"stderr"`
		Drawn  string `json:"drawn"`
	}
	read := func(tag string, v *cellView) chromedp.Action {
		cell := fmt.Sprintf(`[...document.querySelectorAll("#messages .cell")].find((c) => c.querySelector(".cell-code").textContent.includes(%s))`, jsString(tag))
		return chromedp.Tasks{
			until(cell + `?.dataset.done && !document.querySelector("#send").hidden`),
			chromedp.Evaluate(`(() => { const c = `+cell+`;
  return { status: c.querySelector(".status").textContent, text: c.querySelector(".out-wrap").innerText + "\n" + c.querySelector(".cell-result").innerText,
    stderr: [...c.querySelectorAll(".cell-out .stderr")].map((s) => s.textContent).join(""), drawn: c.querySelector(".display")?.innerText || "" } })()`, v),
		}
	}

	t.Run("IPython.display needs no package", func(t *testing.T) {
		var v cellView
		tb.run(t, "display HTML", say(py("from IPython.display import HTML, display\ndisplay(HTML('<b>shim drawn</b>'))")), read("shim drawn", &v))
		tb.shot(t, "01-ipython-display")
		if !strings.HasPrefix(v.Status, "done") || v.Drawn != "shim drawn" {
			t.Errorf("the cell reads %q and draws %q, want it done with its item", v.Status, v.Drawn)
		}
		if v.Stderr != "" || strings.Contains(v.Text, "[sandbox]") || strings.Contains(v.Text, "not available") {
			t.Errorf("the cell says %q (stderr %q): nothing about packages was needed", v.Text, v.Stderr)
		}
	})

	t.Run("a missing package says so once, in one short line", func(t *testing.T) {
		var v cellView
		tb.run(t, "import pandas", say(py("import pandas")), read("import pandas", &v))
		tb.shot(t, "02-missing-package")
		page := ""
		tb.run(t, "read the page", chromedp.Evaluate(`document.querySelector("#messages").innerText`, &page))
		lines := 0
		for _, l := range strings.Split(v.Text, "\n") {
			if strings.TrimSpace(l) != "" {
				lines++
			}
		}
		if n := strings.Count(v.Text, "cannot fetch packages"); n != 1 || !strings.Contains(v.Text, "pandas") || !strings.Contains(v.Text, "administrator") {
			t.Errorf("the cell says %q: want what is missing, that this server cannot fetch packages and whom to ask, once (%d times)", v.Text, n)
		}
		if lines > 5 || strings.Contains(page, "SANDCHAT_") || strings.Contains(page, "operator sets") {
			t.Errorf("the cell reads, in %d lines:\n%s\nwant a short error without the operator's settings", lines, v.Text)
		}
		if log := logs.String(); !strings.Contains(log, "pandas") || !strings.Contains(log, "SANDCHAT_SANDBOX_PACKAGE_CDN") {
			t.Errorf("the server's log does not tell the operator what to set:\n%s", log)
		}
	})

	t.Run("the data tool suggests what loads here: the csv module, not pandas", func(t *testing.T) {
		if code := alice.upload(conv, "sales.csv", "id,city\n1,Paris\n2,Lyon\n"); code != 201 {
			t.Fatalf("upload: %d", code)
		}
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/data_analysis", conv), map[string]any{"enabled": true}, nil)
		result := `[...document.querySelectorAll("#messages .data-result")].pop()`
		var summary string
		tb.run(t, "ask about the file",
			chromedp.Reload(),
			until(`document.querySelector("#conv-title").textContent === "test"`),
			say("What is in sales.csv?"),
			until(result+`?.textContent.includes("sales.csv: CSV")`),
			chromedp.Evaluate(result+`.querySelector("details").open = true; `+result+`.querySelector("details pre").textContent`, &summary),
		)
		tb.shot(t, "03-data-without-pandas")
		if strings.Contains(summary, "import pandas") || !strings.Contains(summary, "import csv") || !strings.Contains(summary, "pandas cannot be loaded on this server") {
			t.Fatalf("the summary suggests:\n%s", summary)
		}
		// What it suggests runs here.
		load := summary[strings.Index(summary, "import csv"):]
		load = load[:strings.Index(load, "rows = list(")] + "rows = list(csv.DictReader(f))"
		var v cellView
		tb.run(t, "run what it suggests", say(py(load+"\nprint(len(rows), rows[1]['city'])")), read("csv.DictReader", &v))
		if !strings.HasPrefix(v.Status, "done") || !strings.Contains(v.Text, "2 Lyon") {
			t.Errorf("the suggested code reads %q (%s)", v.Text, v.Status)
		}
		tb.run(t, "at 390 px", chromedp.EmulateViewport(390, 844), until(narrow),
			chromedp.Evaluate(result+`.scrollIntoView({ block: "start" }); true`, nil))
		tb.shot(t, "04-data-without-pandas-390")
		tb.run(t, "back", chromedp.EmulateViewport(1366, 850))
	})

	t.Run("the API's error is as short", func(t *testing.T) {
		var r struct {
			Status string          `json:"status"`
			Stderr string          `json:"stderr"`
			Error  json.RawMessage `json:"error"`
		}
		alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": "import pandas"}, &r)
		if r.Status != "error" || len(r.Error) > 400 || !strings.Contains(string(r.Error), "cannot fetch packages") ||
			strings.Contains(string(r.Error)+r.Stderr, "SANDCHAT_") || strings.Contains(r.Stderr, "cannot fetch") {
			t.Errorf("the API answers status %s, stderr %q and a %d-byte error: %s", r.Status, r.Stderr, len(r.Error), r.Error)
		}
	})
}
