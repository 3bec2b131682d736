package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

type runJSON struct {
	ID        int64
	Status    string
	Stdout    string
	Stderr    string
	Result    *string
	Error     *struct{ Type, Message, Traceback string }
	Artifacts []struct {
		ID          int64
		Name        string
		ContentType string `json:"content_type"`
		Size        int64
	}
	Session struct {
		Version      int64
		RestoredFrom string `json:"restored_from"`
	}
}

func (c *client) run(conv int64, code string) runJSON {
	c.t.Helper()
	var r runJSON
	c.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": code}, &r)
	return r
}

func (c *client) upload(conv int64, name, content string) int {
	c.t.Helper()
	status, _ := c.uploadAt(conv, name, "", content)
	return status
}

// uploadAt sends content as a file called name, with the form field path when it is
// not empty, and returns the status and the response body.
func (c *client) uploadAt(conv int64, name, path, content string) (int, []byte) {
	c.t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	if path != "" {
		_ = w.WriteField("path", path)
	}
	fw, _ := w.CreateFormFile("file", name)
	_, _ = fw.Write([]byte(content))
	_ = w.Close()
	req, _ := http.NewRequest("POST", fmt.Sprintf("%s/api/v1/conversations/%d/files", c.base, conv), &body)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", w.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		c.t.Fatalf("upload error %d is not problem+json: %s %q", resp.StatusCode, resp.Header.Get("Content-Type"), out)
	}
	return resp.StatusCode, out
}

// headersOnly sends a request's headers announcing a body of size bytes, sends no body,
// and reads the answer.
func (c *client) headersOnly(method, path, contentType string, size int) (int, []byte) {
	c.t.Helper()
	u, err := url.Parse(c.base)
	if err != nil {
		c.t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
		method, path, u.Host, c.token, contentType, size)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// sandboxParty starts a node running the engine with a conversation whose agent has the
// sandbox on: alice owns it, viewer may view it, stranger may not see it.
func sandboxParty(t *testing.T) (m *Main, agent agentJSON, conv int64, alice, viewer, stranger *client) {
	t.Helper()
	m = newEnv(t).sandboxNode()
	alice, _ = m.user(t, "alice", false)
	viewer, viewerID := m.user(t, "viewer", false)
	stranger, _ = m.user(t, "stranger", false)
	agent = alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv = alice.createConversation(agent.ID)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": viewerID, "role": "viewer"}, nil)
	return m, agent, conv, alice, viewer, stranger
}

func TestSandboxAPI(t *testing.T) {
	t.Parallel()
	m, agent, conv, alice, viewer, stranger := sandboxParty(t)
	execPath := fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv)

	t.Run("status", func(t *testing.T) {
		var st struct {
			Available bool
			Deno      struct {
				Installed bool
				Version   string
			}
			Pyodide   struct{ Version string }
			Isolation string
		}
		// The engine's paths and every session's figures are the operator's.
		alice.must(403, "GET", "/api/v1/sandbox/status", nil, nil)
		ops, _ := m.user(t, "ops", true)
		ops.must(200, "GET", "/api/v1/sandbox/status", nil, &st)
		if !st.Available || !st.Deno.Installed || st.Deno.Version == "" || st.Pyodide.Version == "" || !strings.Contains(st.Isolation, "bubblewrap") {
			t.Fatalf("%+v", st)
		}
		if s := alice.tool(conv, "pyodide_sandbox"); !s.Enabled || s.Source != "agent" {
			t.Fatalf("sandbox state %+v", s)
		}
	})
	t.Run("state persists across runs", func(t *testing.T) {
		r := alice.run(conv, "import math\nx = 41\ndef f(a):\n    return a + x")
		if r.Status != "success" || r.Session.Version != 1 {
			t.Fatalf("%+v", r)
		}
		r = alice.run(conv, "print(math.pi > 3)\nf(1)")
		if r.Status != "success" || r.Stdout != "True\n" || r.Result == nil || *r.Result != "42" || r.Session.Version != 2 || r.Session.RestoredFrom != "live" {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("a run the engine would refuse leaves no record", func(t *testing.T) {
		refusedConv := alice.createConversation(agent.ID)
		path := fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", refusedConv)
		alice.must(413, "POST", path, map[string]any{"code": strings.Repeat("x", 257<<10)}, nil)
		for _, ms := range []int64{301_000, math.MaxInt64} {
			alice.must(400, "POST", path, map[string]any{"code": "1", "timeout_ms": ms}, nil)
		}
		var runs []json.RawMessage
		alice.must(200, "GET", path, nil, &runs)
		if len(runs) != 0 {
			t.Fatalf("%d refused runs were recorded", len(runs))
		}
	})
	t.Run("python errors are structured", func(t *testing.T) {
		r := alice.run(conv, "1/0")
		if r.Status != "error" || r.Error == nil || r.Error.Type != "ZeroDivisionError" || !strings.Contains(r.Error.Traceback, "ZeroDivisionError") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("concurrent uploads cannot pass the conversation's quota", func(t *testing.T) {
		quotaConv := alice.createConversation(agent.ID)
		// 8 uploads of 9 MiB at once against a 64 MiB total: at most 7 fit.
		big := strings.Repeat("x", 9<<20)
		codes := make([]int, 8)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() { codes[i] = alice.upload(quotaConv, fmt.Sprintf("part-%d.bin", i), big) })
		}
		wg.Wait()
		ok := 0
		for _, c := range codes {
			switch c {
			case 201:
				ok++
			case 413:
			default:
				t.Fatalf("upload status %d", c)
			}
		}
		var total int64
		for _, f := range alice.files(quotaConv) {
			total += f.Size
		}
		if ok != 7 || total > 64<<20 {
			t.Fatalf("%d uploads accepted, %d bytes stored (codes %v)", ok, total, codes)
		}
	})
	t.Run("uploads are read-only under /data", func(t *testing.T) {
		if got := alice.upload(conv, "data.csv", "a,b\n1,2\n"); got != 201 {
			t.Fatalf("upload status %d", got)
		}
		if got := viewer.upload(conv, "v.csv", "x"); got != 403 {
			t.Fatalf("viewer upload status %d", got)
		}
		r := alice.run(conv, "print(open('/data/data.csv').read(), end='')")
		if r.Status != "success" || r.Stdout != "a,b\n1,2\n" {
			t.Fatalf("%+v", r)
		}
		r = alice.run(conv, "open('/data/data.csv', 'w').write('overwritten')")
		if r.Status != "error" {
			t.Fatalf("writing /data succeeded: %+v", r)
		}
	})
	t.Run("artifacts are stored and downloadable", func(t *testing.T) {
		r := alice.run(conv, "with open('report.txt', 'w') as fh:\n    fh.write('total: 42')")
		if r.Status != "success" || len(r.Artifacts) != 1 || r.Artifacts[0].Name != "report.txt" || r.Artifacts[0].ID == 0 {
			t.Fatalf("%+v", r)
		}
		url := fmt.Sprintf("/api/v1/files/%d", r.Artifacts[0].ID)
		for _, tc := range []struct {
			c    *client
			want int
		}{{alice, 200}, {viewer, 200}, {stranger, 404}} {
			req, _ := http.NewRequest("GET", m.as(t, "").base+url, nil)
			req.Header.Set("Authorization", "Bearer "+tc.c.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("download status %d, want %d", resp.StatusCode, tc.want)
			}
			if tc.want == 200 && (string(body) != "total: 42" || resp.Header.Get("X-Content-Type-Options") != "nosniff" ||
				!strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment")) {
				t.Fatalf("download %q headers %v", body, resp.Header)
			}
		}
	})
	t.Run("every run is recorded", func(t *testing.T) {
		var n int
		if err := m.DB.QueryRow(context.Background(), `select count(*) from executions where conversation_id = $1`, conv).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 6 {
			t.Fatalf("%d executions recorded, want 6", n)
		}
		var list []struct {
			Code      string
			Status    string
			Error     *struct{ Traceback string }
			Artifacts []struct{ Name string }
		}
		viewer.must(200, "GET", execPath, nil, &list)
		stranger.must(404, "GET", execPath, nil, nil)
		if len(list) != 6 || list[0].Code == "" {
			t.Fatalf("listed %+v", list)
		}
		var traceback, report bool
		for _, e := range list {
			traceback = traceback || (e.Status == "error" && e.Error != nil && strings.Contains(e.Error.Traceback, "ZeroDivisionError"))
			report = report || (len(e.Artifacts) == 1 && e.Artifacts[0].Name == "report.txt")
		}
		if !traceback || !report {
			t.Fatalf("tracebacks and artifacts missing from %+v", list)
		}
	})
	t.Run("downloads from a page carry the token in the query", func(t *testing.T) {
		r := alice.run(conv, "with open('page.txt', 'w') as fh:\n    fh.write('from a link')")
		if len(r.Artifacts) != 1 {
			t.Fatalf("%+v", r)
		}
		base := m.as(t, "").base
		for _, tc := range []struct {
			token string
			want  int
		}{{alice.token, 200}, {viewer.token, 200}, {stranger.token, 404}, {"nope", 401}, {"", 401}} {
			resp, err := http.Get(fmt.Sprintf("%s/api/v1/files/%d?access_token=%s", base, r.Artifacts[0].ID, tc.token))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || (tc.want == 200 && string(body) != "from a link") {
				t.Fatalf("token %q: %d %q, want %d", tc.token, resp.StatusCode, body, tc.want)
			}
		}
		// Only downloads: the query token opens nothing else.
		resp, err := http.Get(base + "/api/v1/me?access_token=" + alice.token)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("/me with a query token: %d", resp.StatusCode)
		}
	})
	t.Run("files are deleted by editors only", func(t *testing.T) {
		if code := alice.upload(conv, "gone.csv", "x\n"); code != 201 {
			t.Fatal(code)
		}
		id := alice.files(conv)["gone.csv"].ID
		viewer.must(403, "DELETE", fmt.Sprintf("/api/v1/files/%d", id), nil, nil)
		stranger.must(404, "DELETE", fmt.Sprintf("/api/v1/files/%d", id), nil, nil)
		alice.must(204, "DELETE", fmt.Sprintf("/api/v1/files/%d", id), nil, nil)
		alice.must(404, "GET", fmt.Sprintf("/api/v1/files/%d", id), nil, nil)
		if r := alice.run(conv, "import os; os.path.exists('/data/gone.csv')"); r.Result == nil || *r.Result != "False" {
			t.Fatalf("deleted upload still under /data: %+v", r)
		}
	})

	t.Run("permissions", func(t *testing.T) {
		viewer.must(403, "POST", execPath, map[string]any{"code": "1"}, nil)
		stranger.must(404, "POST", execPath, map[string]any{"code": "1"}, nil)
		viewer.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/session", conv), nil, nil)
		viewer.must(403, "DELETE", fmt.Sprintf("/api/v1/conversations/%d/sandbox/session", conv), nil, nil)
		stranger.must(404, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/session", conv), nil, nil)
	})
	t.Run("bad input", func(t *testing.T) {
		alice.must(400, "POST", execPath, map[string]any{"code": ""}, nil)
		alice.must(400, "POST", execPath, map[string]any{"code": "1", "timeout_ms": -5}, nil)
		alice.must(400, "POST", execPath, map[string]any{"code": "1", "timeout_ms": 10_000_000}, nil)
		alice.must(413, "POST", execPath, map[string]any{"code": strings.Repeat("#", 300<<10)}, nil)
	})
	t.Run("refused while the sandbox is off", func(t *testing.T) {
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": false}, nil)
		var p struct{ Detail string }
		alice.must(409, "POST", execPath, map[string]any{"code": "x"}, &p)
		if !strings.Contains(p.Detail, "off for this conversation") {
			t.Fatalf("detail %q", p.Detail)
		}
		alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": nil}, nil)
		if r := alice.run(conv, "x"); r.Result == nil || *r.Result != "41" {
			t.Fatalf("state lost while off: %+v", r)
		}
	})
	t.Run("reset forgets the session", func(t *testing.T) {
		alice.must(204, "DELETE", fmt.Sprintf("/api/v1/conversations/%d/sandbox/session", conv), nil, nil)
		r := alice.run(conv, "x")
		if r.Status != "error" || r.Error == nil || r.Error.Type != "NameError" {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("two conversations do not share state or random numbers", func(t *testing.T) {
		other := alice.createConversation(agent.ID)
		a := alice.run(conv, "import random\nsecret = 'a'\nrandom.random()")
		b := alice.run(other, "import random\nrandom.random()")
		if a.Result == nil || b.Result == nil || *a.Result == *b.Result {
			t.Fatalf("same random numbers: %v %v", a.Result, b.Result)
		}
		if r := alice.run(other, "secret"); r.Status != "error" {
			t.Fatalf("variable leaked across conversations: %+v", r)
		}
	})
}

type fileJSON struct {
	ID          int64
	Name        string
	Size        int64
	Source      string
	ContentType string `json:"content_type"`
}

func (c *client) files(conv int64) map[string]fileJSON {
	c.t.Helper()
	var list []fileJSON
	c.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/files", conv), nil, &list)
	out := map[string]fileJSON{}
	for _, f := range list {
		if _, dup := out[f.Name]; dup && f.Source == "upload" {
			c.t.Fatalf("two files named %s: %+v", f.Name, list)
		}
		out[f.Name] = f
	}
	return out
}

func (c *client) eval(conv int64, code string) string {
	c.t.Helper()
	r := c.run(conv, code)
	if r.Status != "success" || r.Result == nil {
		c.t.Fatalf("%s: %+v", code, r)
	}
	return *r.Result
}

// problem is the detail of the problem+json body of a refusal.
func problem(t *testing.T, body []byte) string {
	t.Helper()
	var p struct{ Detail string }
	if err := json.Unmarshal(body, &p); err != nil || p.Detail == "" {
		t.Fatalf("problem %q: %v", body, err)
	}
	return p.Detail
}

// TestFiles: uploads keep their folders under /data, Python imports from /data (and sees
// a re-upload), editors delete files and the next run no longer has them, and refusals
// say what is wrong in numbers.
func TestFiles(t *testing.T) {
	t.Parallel()
	_, agent, conv, alice, viewer, stranger := sandboxParty(t)

	t.Run("folders are kept", func(t *testing.T) {
		if code, body := alice.uploadAt(conv, "q1.csv", "reports/2025/q1.csv", "quarter,sales\nq1,42\n"); code != 201 {
			t.Fatalf("upload with a path field: %d %s", code, body)
		}
		if code, body := alice.uploadAt(conv, "data/input.csv", "", "x\n1\n"); code != 201 {
			t.Fatalf("upload of a file in a folder: %d %s", code, body)
		}
		files := alice.files(conv)
		if files["reports/2025/q1.csv"].ID == 0 || files["data/input.csv"].ID == 0 {
			t.Fatalf("file list %+v", files)
		}
		got := alice.eval(conv, "import os\n(open('/data/reports/2025/q1.csv').read(), open('/data/data/input.csv').read(), sorted(os.listdir('/data')))")
		if got != `('quarter,sales\nq1,42\n', 'x\n1\n', ['data', 'reports'])` {
			t.Fatalf("python sees %s", got)
		}
		if r := alice.run(conv, "open('/data/reports/2025/new.csv', 'w')"); r.Status != "error" {
			t.Fatalf("a folder under /data is writable: %+v", r)
		}
	})

	t.Run("bad paths are refused with 400", func(t *testing.T) {
		// The rule itself is sandchat.CheckDataPath's, tested there: these show the API
		// answers with it.
		for name, path := range map[string]string{
			"parent":         "../../etc/passwd",
			"too deep":       strings.Repeat("d/", 8) + "f.csv",
			"file as folder": "reports/2025/q1.csv/inner.csv",
		} {
			t.Run(name, func(t *testing.T) {
				code, body := alice.uploadAt(conv, "f.csv", path, "x")
				want := 400
				if name == "file as folder" {
					want = 409
				}
				if code != want {
					t.Fatalf("%q: %d %s", path, code, body)
				}
				if d := problem(t, body); !strings.Contains(d, "/") && !strings.Contains(d, "relative path") {
					t.Errorf("detail %q does not say what is wrong", d)
				}
			})
		}
		if code, body := alice.uploadAt(conv, "../../etc/passwd", "", "x"); code != 400 {
			t.Fatalf("file name with '..': %d %s", code, body)
		}
	})

	t.Run("python imports from /data and sees a re-upload", func(t *testing.T) {
		if code, _ := alice.uploadAt(conv, "mymodule.py", "", "def greet():\n    return 'v1'\n"); code != 201 {
			t.Fatal(code)
		}
		alice.uploadAt(conv, "__init__.py", "tools/__init__.py", "")
		alice.uploadAt(conv, "text.py", "tools/text.py", "def shout(s):\n    return s.upper()\n")
		if got := alice.eval(conv, "import mymodule\nfrom tools.text import shout\nmymodule.greet() + shout('!ok')"); got != "'v1!OK'" {
			t.Fatalf("first import: %s", got)
		}
		code, body := alice.uploadAt(conv, "mymodule.py", "", "def greet():\n    return 'v2'\n")
		var ref fileJSON
		if code != 200 || json.Unmarshal(body, &ref) != nil || ref.ID != alice.files(conv)["mymodule.py"].ID {
			t.Fatalf("re-upload: %d %s", code, body)
		}
		if got := alice.eval(conv, "import mymodule\nmymodule.greet()"); got != "'v2'" {
			t.Fatalf("after re-upload: %s", got)
		}
		// An unchanged module is not re-run: its state stays.
		alice.eval(conv, "import tools.text\ntools.text.calls = 1\n0")
		alice.uploadAt(conv, "other.txt", "", "unrelated change")
		if got := alice.eval(conv, "import tools.text\ntools.text.calls"); got != "1" {
			t.Fatalf("an unchanged module was reloaded: %s", got)
		}
	})

	t.Run("editors delete, viewers read, strangers see nothing", func(t *testing.T) {
		alice.uploadAt(conv, "helper.py", "", "VALUE = 7\n")
		if code, _ := alice.uploadAt(conv, "gone.csv", "old/gone.csv", "bye\n"); code != 201 {
			t.Fatal(code)
		}
		if got := alice.eval(conv, "import os, helper\n(os.path.exists('/data/old/gone.csv'), helper.VALUE)"); got != "(True, 7)" {
			t.Fatalf("before delete: %s", got)
		}
		gone, helper := alice.files(conv)["old/gone.csv"], alice.files(conv)["helper.py"]
		url := func(id int64) string { return fmt.Sprintf("/api/v1/files/%d", id) }
		if v := viewer.files(conv); v["old/gone.csv"].ID != gone.ID {
			t.Fatalf("viewer's list %+v", v)
		}
		if resp, body := viewer.rawDo("GET", url(gone.ID), nil); resp.StatusCode != 200 || string(body) != "bye\n" ||
			!strings.Contains(resp.Header.Get("Content-Disposition"), `filename=gone.csv`) {
			t.Fatalf("viewer download: %d %q %v", resp.StatusCode, body, resp.Header)
		}
		viewer.must(403, "DELETE", url(gone.ID), nil, nil)
		stranger.must(404, "GET", fmt.Sprintf("/api/v1/conversations/%d/files", conv), nil, nil)
		stranger.must(404, "GET", url(gone.ID), nil, nil)
		stranger.must(404, "DELETE", url(gone.ID), nil, nil)
		alice.must(204, "DELETE", url(gone.ID), nil, nil)
		alice.must(204, "DELETE", url(helper.ID), nil, nil)
		alice.must(404, "DELETE", url(gone.ID), nil, nil)
		if f := alice.files(conv); f["old/gone.csv"].ID != 0 || f["helper.py"].ID != 0 {
			t.Fatalf("deleted files still listed: %+v", f)
		}
		got := alice.eval(conv, "import os, importlib.util\n(os.path.exists('/data/old'), importlib.util.find_spec('helper') is None)")
		if got != "(False, True)" {
			t.Fatalf("after delete, python sees %s", got)
		}
	})

	t.Run("size limits state the sizes", func(t *testing.T) {
		code, body := alice.uploadAt(conv, "input.csv", "", strings.Repeat("x", 25<<19))
		if d := problem(t, body); code != 413 || d != "input.csv is 12.5 MiB; uploads are limited to 10 MiB per file." {
			t.Fatalf("one big file: %d %q", code, d)
		}
		// Past the server's body limit the upload is refused from its headers, before
		// any of the body is read; the test sends none, so the refusal cannot race the
		// client's writing.
		code, body = alice.headersOnly("POST", fmt.Sprintf("/api/v1/conversations/%d/files", conv), "multipart/form-data; boundary=x", 17<<20)
		if d := problem(t, body); code != 413 || d != "The request body is 17 MiB; requests are limited to 16 MiB." {
			t.Fatalf("over the body limit: %d %q", code, d)
		}
		full := alice.createConversation(agent.ID)
		for i := range 6 {
			if code, _ := alice.uploadAt(full, fmt.Sprintf("part-%d.bin", i), "", strings.Repeat("y", 10<<20)); code != 201 {
				t.Fatal(code)
			}
		}
		code, body = alice.uploadAt(full, "input.csv", "", strings.Repeat("z", 5<<20))
		if d := problem(t, body); code != 413 || !strings.HasPrefix(d, "This conversation's uploads take 60 MiB of the 64 MiB uploads may take; input.csv (5 MiB) does not fit.") {
			t.Fatalf("over the conversation's total: %d %q", code, d)
		}
		r := alice.run(conv, "open('huge.bin', 'wb').write(b'0' * (11 << 20))\nopen('fine.txt', 'w').write('ok')")
		if r.Status != "success" || len(r.Artifacts) != 1 || r.Artifacts[0].Name != "fine.txt" ||
			!strings.Contains(r.Stderr, "huge.bin is 11 MiB; files from a run are limited to 10 MiB each") {
			t.Fatalf("artifact over its cap: %+v", r)
		}
	})
}

// TestLookAlikeFileNames: an upload whose name holds a character that hides or reorders
// text ("invoice\u202egnp.py" shows as "invoiceyp.png") is refused, whether the name
// comes as the multipart file name or the path field; an upload in decomposed Unicode
// is stored under its NFC name, the one Python code spells; a file Python makes with
// such a name is kept under its plain form, so the run loses nothing.
func TestLookAlikeFileNames(t *testing.T) {
	t.Parallel()
	m, _, conv, alice, _, _ := sandboxParty(t)
	for _, tc := range []struct{ name, file, path, says string }{
		{"right-to-left override in the file name", "invoice\u202egnp.py", "", "U+202E RIGHT-TO-LEFT OVERRIDE at character 8"},
		{"zero width space in the path field", "x.csv", "reports/pay\u200broll.csv", "U+200B ZERO WIDTH SPACE at character 12"},
		{"isolate in a folder name", "x.csv", "\u2066q1/x.csv", "U+2066 LEFT-TO-RIGHT ISOLATE at character 1"},
		{"byte order mark", "\ufeffdata.csv", "", "U+FEFF ZERO WIDTH NO-BREAK SPACE at character 1"},
		{"a file name of dots and spaces", " .. ", "", `made only of dots and spaces (" .. ")`},
		{"a folder of dots in the path field", "x.csv", "reports/.../x.csv", `made only of dots and spaces ("...")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := alice.uploadAt(conv, tc.file, tc.path, "x")
			if code != 400 {
				t.Fatalf("%d %s, want 400", code, body)
			}
			if d := problem(t, body); !strings.Contains(d, tc.says) {
				t.Fatalf("detail %q, want it saying %q", d, tc.says)
			}
		})
	}
	if files := alice.files(conv); len(files) != 0 {
		t.Errorf("refused uploads stored: %+v", files)
	}

	t.Run("an upload stored under a name refused today does not stop the conversation's runs", func(t *testing.T) {
		// As an upload stored before the rule would be: straight into the table.
		if _, err := m.DB.Exec(context.Background(), `insert into files (conversation_id, source, name, content_type, size, data)
			values ($1, 'upload', $2, 'text/plain', 1, 'x')`, conv, "old\u202egnp.py"); err != nil {
			t.Fatal(err)
		}
		if got := alice.eval(conv, "import os\nsorted(os.listdir('/data')) if os.path.isdir('/data') else []"); got != "[]" {
			t.Fatalf("python sees %s in /data, want the old upload left out", got)
		}
		if _, err := m.DB.Exec(context.Background(), `delete from files where conversation_id = $1 and name = $2`, conv, "old\u202egnp.py"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("decomposed Unicode is stored in NFC", func(t *testing.T) {
		if code, body := alice.uploadAt(conv, "cafe\u0301.csv", "", "a\n1\n"); code != 201 {
			t.Fatalf("%d %s", code, body)
		}
		if f := alice.files(conv); f["caf\u00e9.csv"].ID == 0 {
			t.Fatalf("files %+v, want caf\\u00e9.csv", f)
		}
		if code, _ := alice.uploadAt(conv, "caf\u00e9.csv", "", "a\n2\n"); code != 200 {
			t.Fatalf("the composed spelling of the same name is a new file: %d", code)
		}
		if got := alice.eval(conv, "open('/data/caf\u00e9.csv').read()"); got != `'a\n2\n'` {
			t.Fatalf("python reads %s", got)
		}
	})

	t.Run("a file Python makes is kept under a plain name", func(t *testing.T) {
		r := alice.run(conv, "open('invoice\\u202egnp.py', 'w').write('print(1)')")
		if r.Status != "success" || len(r.Artifacts) != 1 || r.Artifacts[0].Name != "invoice_U+202E_gnp.py" || r.Artifacts[0].ID == 0 {
			t.Fatalf("run %+v, want its file stored as invoice_U+202E_gnp.py", r)
		}
	})
}
