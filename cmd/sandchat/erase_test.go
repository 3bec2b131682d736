package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/sandbox"
)

// pythonLeft is what is left of a conversation's Python state: its session's Redis keys
// (the marker that refuses late saves aside) and its blobs in the cold tier.
func (e *testEnv) pythonLeft(m *Main, conv int64) (keys []string, blobs int) {
	e.t.Helper()
	ctx := context.Background()
	all, err := e.rdb.Keys(ctx, fmt.Sprintf("%ssandbox:{conv:%d}*", e.redisPrefix, conv)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, k := range all {
		if !strings.HasSuffix(k, ":gone") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if err := m.DB.QueryRow(ctx, `select count(*) from sandbox_blobs where session = $1`,
		fmt.Sprintf("%ssandbox:conv:%d", e.redisPrefix, conv)).Scan(&blobs); err != nil {
		e.t.Fatal(err)
	}
	return keys, blobs
}

// withState runs code in the conversation that leaves Python state in both tiers (a heap
// of 1 MiB and a file of 200 KiB, cold once checkpointed), as c on its node.
func (e *testEnv) withState(m *Main, c *client, conv int64) {
	e.t.Helper()
	for _, code := range []string{"import os\nheap = os.urandom(1 << 20)", "open('big.bin', 'wb').write(os.urandom(200 << 10))"} {
		if r := c.run(conv, code); r.Status != "success" {
			e.t.Fatalf("run in conversation %d: %+v", conv, r)
		}
	}
	eventually(e.t, 60*time.Second, "the heap checkpointed to the cold tier", func() bool {
		_, blobs := e.pythonLeft(m, conv)
		return blobs >= 2
	})
}

// unzip reads an export into its files' contents by name.
func unzip(t *testing.T, raw []byte) map[string]string {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatalf("the export is no zip (%v): %.200s", err, raw)
	}
	out := map[string]string{}
	for _, f := range zr.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r)
		r.Close()
		out[f.Name] = string(b)
	}
	return out
}

// TestUserEraseAndExport: a member sees their conversation's Python session without
// the server's paths; a user exports their own data, an administrator anyone's
// (recorded); and an erase, by the admin API or the command line, deletes everything
// of the user's, their Python state in Redis and Postgres and their live process on
// another node included, takes their words out of others' conversations, and leaves
// everything of others in place.
func TestUserEraseAndExport(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	a, b := env.sandboxNode(), env.sandboxNode()
	root, _ := a.user(t, "root", true)
	alice, aliceID := a.user(t, "alice", false)
	bob, bobID := a.user(t, "bob", false)
	stranger, _ := a.user(t, "stranger", false)
	aliceAtB := b.as(t, alice.token)
	sandboxOn := map[string]bool{"pyodide_sandbox": true}
	mine := alice.createConversation(alice.createAgent(map[string]any{"name": "Coder", "internal_tools": sandboxOn}).ID)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", mine), map[string]any{"user_id": bobID, "role": "viewer"}, nil)
	theirs := bob.createConversation(bob.createAgent(map[string]any{"name": "Bob's", "internal_tools": sandboxOn}).ID)
	bob.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", theirs), map[string]any{"user_id": aliceID, "role": "editor"}, nil)

	// Alice's Python state in both tiers, her session live on node b; her upload.
	env.withState(a, aliceAtB, mine)
	if _, err := b.Engine.Inspect(fmt.Sprintf("conv:%d", mine)); err != nil {
		t.Fatalf("alice's session is not live on node b: %v", err)
	}
	if s := alice.upload(mine, "notes.csv", "a,b\n1,2\n"); s != 201 {
		t.Fatalf("upload: %d", s)
	}
	if status, _ := alice.say(mine, "hello"); status != "completed" {
		t.Fatalf("alice's turn: %s", status)
	}
	// Her words, a run and an upload in bob's conversation; bob's own words there.
	const secret = "my secret plan: 7 blue ducks"
	if status, _ := alice.say(theirs, secret); status != "completed" {
		t.Fatalf("alice's turn in bob's conversation: %s", status)
	}
	if r := alice.run(theirs, "shared = 41"); r.Status != "success" {
		t.Fatalf("%+v", r)
	}
	if s := alice.upload(theirs, "alice.txt", "hers"); s != 201 {
		t.Fatalf("upload: %d", s)
	}
	if status, _ := bob.say(theirs, "bob's own words"); status != "completed" {
		t.Fatalf("bob's turn: %s", status)
	}

	t.Run("a member sees their conversation's session, without the server's paths", func(t *testing.T) {
		resp, raw := bob.rawDo("GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/session", mine), nil)
		if resp.StatusCode != 200 || !strings.Contains(string(raw), `"big.bin"`) {
			t.Fatalf("the viewer's look at the session: %d %s", resp.StatusCode, raw)
		}
		cfg := a.Engine.Config()
		for _, leak := range []string{cfg.RuntimeDir, cfg.PyodideDir, cfg.DenoPath, cfg.PackageCacheDir, os.TempDir(), "/home/", "/proc/",
			env.redisPrefix, "sandbox_blobs", fmt.Sprintf("conv:%d", theirs)} {
			if leak != "" && strings.Contains(string(raw), leak) {
				t.Fatalf("the session shows %q: %s", leak, raw)
			}
		}
		stranger.must(404, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/session", mine), nil, nil)
	})

	t.Run("export", func(t *testing.T) {
		resp, raw := alice.rawDo("GET", "/api/v1/me/export", nil)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/zip" || !strings.Contains(resp.Header.Get("Content-Disposition"), "attachment") {
			t.Fatalf("own export: %d %v", resp.StatusCode, resp.Header)
		}
		files := unzip(t, raw)
		dir := fmt.Sprintf("conversations/%d/", mine)
		var user sandchat.User
		if err := json.Unmarshal([]byte(files["user.json"]), &user); err != nil || user.ID != aliceID {
			t.Fatalf("user.json %q %v", files["user.json"], err)
		}
		for name, want := range map[string]string{
			dir + "conversation.json": `"owner_id": ` + strconv.FormatInt(aliceID, 10),
			dir + "messages.json":     `"role": "user"`,
			dir + "executions.json":   "os.urandom(1 << 20)",
			dir + "files/notes.csv":   "a,b\n1,2\n",
			"agents.json":             `"name": "Coder"`,
			"messages_elsewhere.json": secret,
			"README.txt":              "messages_elsewhere.json",
		} {
			if got, ok := files[name]; !ok || !strings.Contains(got, want) {
				t.Errorf("%s: %q, want it to hold %q", name, got, want)
			}
		}
		for name := range files {
			if strings.HasPrefix(name, fmt.Sprintf("conversations/%d/", theirs)) {
				t.Fatalf("alice's export holds bob's conversation: %s", name)
			}
		}
		if strings.Contains(files["messages_elsewhere.json"], "bob's own words") {
			t.Fatal("alice's export holds bob's words")
		}
		bob.must(403, "GET", fmt.Sprintf("/api/v1/admin/users/%d/export", aliceID), nil, nil)
		resp, raw = root.rawDo("GET", fmt.Sprintf("/api/v1/admin/users/%d/export", aliceID), nil)
		if resp.StatusCode != 200 || unzip(t, raw)[dir+"files/notes.csv"] == "" {
			t.Fatalf("an admin's export: %d", resp.StatusCode)
		}
		var audit []sandchat.AuditEntry
		root.must(200, "GET", fmt.Sprintf("/api/v1/admin/audit?target_type=user&target_id=%d", aliceID), nil, &audit)
		if len(audit) != 1 || audit[0].Action != sandchat.ActionUserExport {
			t.Fatalf("the admin's export recorded as %+v", audit)
		}
	})

	t.Run("erase by the admin API", func(t *testing.T) {
		bob.must(403, "POST", fmt.Sprintf("/api/v1/admin/users/%d/erase", aliceID), nil, nil)
		var done struct {
			ConversationsDeleted int   `json:"conversations_deleted"`
			AgentsDeleted        int   `json:"agents_deleted"`
			Messages             int64 `json:"messages_anonymized"`
			Uploads              int64 `json:"uploads_deleted"`
		}
		root.must(200, "POST", fmt.Sprintf("/api/v1/admin/users/%d/erase", aliceID), nil, &done)
		if done.ConversationsDeleted != 1 || done.AgentsDeleted != 1 || done.Messages != 1 || done.Uploads != 1 {
			t.Fatalf("erase said %+v", done)
		}
		if keys, blobs := env.pythonLeft(a, mine); len(keys) != 0 || blobs != 0 {
			t.Fatalf("alice's Python state left: keys %v, %d blobs", keys, blobs)
		}
		eventually(t, 30*time.Second, "node b to close alice's live session", func() bool {
			_, err := b.Engine.Inspect(fmt.Sprintf("conv:%d", mine))
			return err != nil
		})
		ctx := context.Background()
		var rows int
		if err := a.DB.QueryRow(ctx, `select (select count(*) from conversations where id = $1 or owner_id = $2)
			+ (select count(*) from files where conversation_id = $1 or created_by = $2)
			+ (select count(*) from executions where conversation_id = $1)
			+ (select count(*) from messages where conversation_id = $1 or user_id = $2)
			+ (select count(*) from agents where owner_id = $2)
			+ (select count(*) from api_tokens where user_id = $2)
			+ (select count(*) from users where id = $2)`, mine, aliceID).Scan(&rows); err != nil || rows != 0 {
			t.Fatalf("%d rows of alice's left (%v)", rows, err)
		}
		alice.must(401, "GET", "/api/v1/me", nil, nil)
		aliceAtB.must(401, "GET", "/api/v1/me", nil, nil)

		// Bob's conversation keeps its shape and his words; hers are gone.
		msgs := bob.messages(theirs)
		var erased, bobs int
		for _, m := range msgs {
			if strings.Contains(m.Content, secret) {
				t.Fatalf("alice's words are still in bob's conversation: %+v", m)
			}
			if m.Content == conversations.ErasedContent {
				erased++
			}
			if m.Content == "bob's own words" {
				bobs++
			}
		}
		if erased != 1 || bobs != 1 {
			t.Fatalf("bob's conversation after the erase: %d erased, %d of bob's: %+v", erased, bobs, msgs)
		}
		if files := bob.files(theirs); len(files) != 0 {
			t.Fatalf("alice's upload is left in bob's conversation: %v", files)
		}
		if got := bob.eval(theirs, "shared + 1"); got != "42" {
			t.Fatalf("bob's Python session after the erase: %s", got)
		}
		var audit []sandchat.AuditEntry
		root.must(200, "GET", fmt.Sprintf("/api/v1/admin/audit?target_type=user&target_id=%d", aliceID), nil, &audit)
		var details map[string]int
		if len(audit) == 0 || audit[0].Action != sandchat.ActionUserErase || json.Unmarshal(audit[0].Details, &details) != nil ||
			details["conversations_deleted"] != 1 || details["messages_anonymized"] != 1 {
			t.Fatalf("the erase recorded as %+v", audit)
		}
		for _, e := range audit {
			if strings.Contains(string(e.Details), "alice") {
				t.Fatalf("the audit still names alice: %s %s", e.Action, e.Details)
			}
		}
		root.must(404, "POST", fmt.Sprintf("/api/v1/admin/users/%d/erase", aliceID), nil, nil)
	})

	t.Run("erase by the command line", func(t *testing.T) {
		carol, carolID := b.user(t, "carol", false)
		conv := carol.createConversation(carol.createAgent(map[string]any{"name": "Carol's", "internal_tools": sandboxOn}).ID)
		env.withState(a, carol, conv)
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"user", "erase", "--id", strconv.FormatInt(carolID, 10),
			"--database-url", env.databaseURL, "--redis-url", testenv.RedisURL(), "--redis-prefix", env.redisPrefix}, &out, &errOut)
		if err != nil || !strings.Contains(errOut.String(), "1 conversations and 1 agents deleted") {
			t.Fatalf("sandchat user erase: %v\n%s", err, errOut.String())
		}
		if keys, blobs := env.pythonLeft(a, conv); len(keys) != 0 || blobs != 0 {
			t.Fatalf("carol's Python state left: keys %v, %d blobs", keys, blobs)
		}
		eventually(t, 30*time.Second, "node b to close carol's live session", func() bool {
			_, err := b.Engine.Inspect(fmt.Sprintf("conv:%d", conv))
			return err != nil
		})
		carol.must(401, "GET", "/api/v1/me", nil, nil)
		var audit []sandchat.AuditEntry
		root.must(200, "GET", fmt.Sprintf("/api/v1/admin/audit?target_type=user&target_id=%d", carolID), nil, &audit)
		if len(audit) < 2 || audit[0].Action != sandchat.ActionUserErase || audit[0].Actor.CLI == "" {
			t.Fatalf("the command line's erase recorded as %+v", audit)
		}
	})
}

// TestRetention: with SANDCHAT_RETENTION set, a conversation no one used for longer is
// deleted with all of its data, its Python state in both tiers and its live process
// included, and counted; one used within it stays, and so does its Python state. A
// retention below its minimum stops the server at start.
func TestRetention(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	// Ten minutes, its minimum lowered to one for the test: the conversation made idle
	// below is two hours old, the other is fresh.
	m := env.sandboxNode(func(c *Config, m *Main) { c.Retention = 10 * time.Minute; m.RetentionMin = time.Minute })
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	old, fresh := alice.createConversation(agent.ID), alice.createConversation(agent.ID)
	for _, conv := range []int64{old, fresh} {
		env.withState(m, alice, conv)
		if s := alice.upload(conv, "in.csv", "a\n1\n"); s != 201 {
			t.Fatalf("upload: %d", s)
		}
		if status, _ := alice.say(conv, "hello"); status != "completed" {
			t.Fatalf("turn: %s", status)
		}
	}
	ctx := context.Background()
	for _, q := range []string{`update conversations set updated_at = now() - interval '2 hours' where id = $1`,
		`update executions set created_at = now() - interval '2 hours' where conversation_id = $1`,
		`update files set created_at = now() - interval '2 hours' where conversation_id = $1`} {
		if _, err := m.DB.Exec(ctx, q, old); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Engine.Inspect(fmt.Sprintf("conv:%d", old)); err != nil {
		t.Fatalf("the idle conversation's session is not live: %v", err)
	}
	gone := func() bool {
		var n int
		if err := m.DB.QueryRow(ctx, `select count(*) from conversations where id = $1`, old).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}
	// The server sweeps every few minutes; a pass now does what the next would (the
	// one running meanwhile, if any, holds the lock and this one waits for the next).
	eventually(t, 60*time.Second, "retention to delete the idle conversation", func() bool {
		if _, _, err := m.Retention.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		return gone()
	})
	if keys, blobs := env.pythonLeft(m, old); len(keys) != 0 || blobs != 0 {
		t.Fatalf("the deleted conversation's Python state left: keys %v, %d blobs", keys, blobs)
	}
	var rows int
	if err := m.DB.QueryRow(ctx, `select (select count(*) from messages where conversation_id = $1) + (select count(*) from files where conversation_id = $1)
		+ (select count(*) from executions where conversation_id = $1) + (select count(*) from turns where conversation_id = $1)`, old).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d rows of the deleted conversation left (%v)", rows, err)
	}
	if _, err := m.Engine.Inspect(fmt.Sprintf("conv:%d", old)); err == nil {
		t.Fatal("the deleted conversation's session is still live")
	}
	if got := alice.eval(fresh, "(len(heap), os.path.getsize('big.bin'))"); got != "(1048576, 204800)" {
		t.Fatalf("the fresh conversation's session: %s", got)
	}
	alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/messages", fresh), nil, nil)
	if n := counterValue(t, m, "sandchat_retention_deleted_conversations_total"); n != 1 {
		t.Fatalf("sandchat_retention_deleted_conversations_total = %v, want 1", n)
	}
	resp, raw := alice.rawDo("GET", "/metrics", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(raw), "sandchat_retention_deleted_conversations_total 1") {
		t.Fatalf("/metrics: %d, no retention counter of 1", resp.StatusCode)
	}

	t.Run("below its minimum", func(t *testing.T) {
		cfg := m.Config
		cfg.Addr, cfg.Retention, cfg.Sandbox.Enabled = "127.0.0.1:0", time.Hour, false
		short := NewMain(cfg, m.Log)
		err := short.Run(ctx)
		short.Close()
		if err == nil || !strings.Contains(err.Error(), "SANDCHAT_RETENTION") || !strings.Contains(err.Error(), "minimum") {
			t.Fatalf("a retention of an hour: %v, want it refused", err)
		}
	})
}

// TestExportNamesStayInside: the names of the files a run made are the code's to
// choose, and a zip entry named after one must unpack inside the folder it is unpacked
// in, on every system: a backslash, which Windows reads as a folder's end, a drive's
// colon and parts made only of dots are no way out of it.
func TestExportNamesStayInside(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	m := env.sandboxNode()
	alice, _ := m.user(t, "alice", false)
	conv := alice.createConversation(alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}}).ID)
	code := `for name in ['..\\..\\..\\..\\..\\..\\evil.bat', 'C:\\Windows\\evil.dll', '. .\\.. .\\evil.txt']:
    open(name, 'w').write('owned')`
	if r := alice.run(conv, code); r.Status != "success" || len(r.Artifacts) != 3 {
		t.Fatalf("the run that names its files: %+v", r)
	}
	resp, raw := alice.rawDo("GET", "/api/v1/me/export", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("export: %d %s", resp.StatusCode, raw)
	}
	var kept []string
	for name, content := range unzip(t, raw) {
		if strings.ContainsAny(name, `\:`) || !filepath.IsLocal(name) || path.Clean(name) != name {
			t.Errorf("the export holds %q, which may unpack outside its folder", name)
		}
		if content == "owned" {
			kept = append(kept, path.Base(name))
		}
	}
	slices.Sort(kept)
	if want := []string{"evil.bat", "evil.dll", "evil.txt"}; !slices.Equal(kept, want) {
		t.Fatalf("the run's files are exported as %v, want %v", kept, want)
	}
}

// TestExportHoldsEveryRun: an export holds every run of a conversation, however many
// (the conversation's own list shows the newest 500), read a page at a time.
func TestExportHoldsEveryRun(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	engine := newScriptedEngine(env.rdb)
	engine.prefix = env.redisPrefix + "engine:"
	m := env.node(func(_ *Config, m *Main) { m.SandboxEngine = engine })
	var h sandbox.History = m.Store
	engine.history.Store(&h)
	alice, _ := m.user(t, "alice", false)
	conv := alice.createConversation(alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}}).ID)
	const runs = 523
	for i := range runs {
		if r := alice.run(conv, fmt.Sprintf("counter += %d", i+1)); r.Status != "success" {
			t.Fatalf("run %d: %+v", i+1, r)
		}
	}
	resp, raw := alice.rawDo("GET", "/api/v1/me/export", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("export: %d %s", resp.StatusCode, raw)
	}
	var got []struct{ Code string }
	if err := json.Unmarshal([]byte(unzip(t, raw)[fmt.Sprintf("conversations/%d/executions.json", conv)]), &got); err != nil {
		t.Fatalf("executions.json: %v", err)
	}
	if len(got) != runs || got[0].Code != "counter += 1" || got[runs-1].Code != fmt.Sprintf("counter += %d", runs) {
		t.Fatalf("executions.json holds %d runs, want all %d, oldest first", len(got), runs)
	}
}

// TestExportWithoutTempDir: an export on a server whose temporary directory cannot be
// written (a read-only root file system with no room mounted at /tmp) is a 503 that
// says so, and an error in the log that names the directory: not a "try again in a few
// seconds" that nothing explains. It sets TMPDIR, so it runs alone.
func TestExportWithoutTempDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	t.Setenv("TMPDIR", missing)
	env := newEnv(t)
	logs := &logBuffer{}
	m := env.node(func(_ *Config, m *Main) { m.Log = slog.New(slog.NewTextHandler(logs, nil)) })
	alice, _ := m.user(t, "alice", false)
	resp, raw := alice.rawDo("GET", "/api/v1/me/export", nil)
	var p problemJSON
	_ = json.Unmarshal(raw, &p)
	if resp.StatusCode != 503 || !strings.Contains(p.Detail, "temporary directory cannot be written") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("an export with no temporary directory: %d %s", resp.StatusCode, raw)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), missing) {
		t.Fatalf("the log does not say why exports fail:\n%s", logs.String())
	}
}

// TestExportsAtOnce: a node prepares one export of a user at a time, and two in all:
// each holds a copy of someone's data on its disk until it is sent, so one user asking
// again and again without waiting (or many at once) would fill it. What is refused is a
// 429 saying so; the exports under way finish, and the next one is taken.
func TestExportsAtOnce(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	m := env.node()
	ctx := context.Background()
	var users []*client
	for i := range 4 {
		c, _ := m.user(t, fmt.Sprintf("u%d", i), false)
		c.createConversation(0)
		users = append(users, c)
	}
	export := func(c *client) (int, string) {
		req, _ := http.NewRequest("GET", c.base+"/api/v1/me/export", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Exports reach the runs of each conversation, and wait there while the test holds
	// the table (on a connection of its own: the node's pool is small).
	conn, err := pgx.Connect(ctx, env.databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `lock table executions in access exclusive mode`); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		status int
		body   string
	}
	answers := make(chan answer, 2)
	for _, c := range users[:2] {
		go func() {
			status, body := export(c)
			answers <- answer{status, body}
		}()
	}
	eventually(t, 60*time.Second, "two exports under way", func() bool {
		var n int
		_ = conn.QueryRow(ctx, `select count(*) from pg_locks where not granted and relation = 'executions'::regclass`).Scan(&n)
		return n == 2
	})
	for i, want := range map[int]string{0: "being prepared already", 2: "preparing 2 exports already"} {
		if status, body := export(users[i]); status != 429 || !strings.Contains(body, want) {
			t.Fatalf("u%d's export while two are under way: %d %s, want 429 saying %q", i, status, body, want)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if a := <-answers; a.status != 200 {
			t.Fatalf("an export under way: %d %.300s", a.status, a.body)
		}
	}
	if status, body := export(users[3]); status != 200 {
		t.Fatalf("an export once the others are done: %d %.300s", status, body)
	}
}

// TestExportFromAnotherSite: another site's page cannot have a signed-in browser export
// data by sending it to the export's address (a link, a redirect: the session's cookie
// goes with a top-level navigation): nothing is read, and no export is put on an
// administrator's record. Typed in the address bar, or from the server's own pages, it
// works.
func TestExportFromAnotherSite(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	m := env.node()
	root, rootID := m.user(t, "root", true)
	_, bobID := m.user(t, "bob", false)
	_, _, browser := exchange(t, root.base, mintLink(root, rootID), nil)
	bobs := fmt.Sprintf("/api/v1/admin/users/%d/export", bobID)
	exports := func() int {
		var audit []sandchat.AuditEntry
		root.must(200, "GET", fmt.Sprintf("/api/v1/admin/audit?target_type=user&target_id=%d", bobID), nil, &audit)
		n := 0
		for _, e := range audit {
			if e.Action == sandchat.ActionUserExport {
				n++
			}
		}
		return n
	}
	crossSite := map[string]string{"Origin": "", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
	for _, path := range []string{bobs, "/api/v1/me/export"} {
		if resp, raw := browser.send("GET", path, nil, crossSite); resp.StatusCode != 403 {
			t.Fatalf("GET %s from another site's page: %d %.200s, want 403", path, resp.StatusCode, raw)
		}
	}
	if n := exports(); n != 0 {
		t.Fatalf("another site's page put %d exports of bob on the admin's record", n)
	}
	for _, site := range []string{"none", "same-origin"} {
		if resp, raw := browser.send("GET", bobs, nil, map[string]string{"Origin": "", "Sec-Fetch-Site": site}); resp.StatusCode != 200 {
			t.Fatalf("GET %s with Sec-Fetch-Site %s: %d %.200s", bobs, site, resp.StatusCode, raw)
		}
	}
	if n := exports(); n != 2 {
		t.Fatalf("%d exports of bob on record, want the admin's 2", n)
	}
}

// forgetRefused is the scripted engine, except that the Python state of one session
// cannot be deleted (Redis unreachable at that moment), while refuse holds its key.
type forgetRefused struct {
	*scriptedEngine
	refuse atomic.Value // string
}

func (e *forgetRefused) Forget(ctx context.Context, key string) error {
	if r, _ := e.refuse.Load().(string); r == key {
		return sandchat.Unavailable(sandchat.DepRedis, errors.New("injected: the session's state could not be deleted"))
	}
	return e.scriptedEngine.Forget(ctx, key)
}

// TestEraseStoppedIsRecorded: an erase that stops part way has deleted what it deleted
// by then, for good: that is on the record at once, not only if and when the erase is
// asked again (whose own record counts only what it did then).
func TestEraseStoppedIsRecorded(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	engine := &forgetRefused{scriptedEngine: newScriptedEngine(env.rdb)}
	engine.prefix = env.redisPrefix + "engine:"
	m := env.node(func(_ *Config, m *Main) { m.SandboxEngine = engine })
	var h sandbox.History = m.Store
	engine.history.Store(&h)
	root, _ := m.user(t, "root", true)
	alice, aliceID := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	first, second := alice.createConversation(agent.ID), alice.createConversation(agent.ID)
	for _, conv := range []int64{first, second} {
		if r := alice.run(conv, "counter += 1"); r.Status != "success" {
			t.Fatalf("%+v", r)
		}
	}
	erasures := func() []map[string]any {
		var audit []sandchat.AuditEntry
		root.must(200, "GET", fmt.Sprintf("/api/v1/admin/audit?target_type=user&target_id=%d", aliceID), nil, &audit)
		var out []map[string]any
		for _, e := range audit {
			if e.Action == sandchat.ActionUserErase {
				var d map[string]any
				_ = json.Unmarshal(e.Details, &d)
				out = append(out, d)
			}
		}
		return out
	}
	erase := fmt.Sprintf("/api/v1/admin/users/%d/erase", aliceID)
	engine.refuse.Store(fmt.Sprintf("conv:%d", second))
	root.unavailable(sandchat.DepRedis, "POST", erase, nil)
	var left []int64
	rows, _ := m.DB.Query(context.Background(), `select id from conversations where owner_id = $1 order by id`, aliceID)
	for rows.Next() {
		var id int64
		_ = rows.Scan(&id)
		left = append(left, id)
	}
	rows.Close()
	if !slices.Equal(left, []int64{second}) {
		t.Fatalf("alice's conversations after the erase stopped: %v, want only %d", left, second)
	}
	if got := erasures(); len(got) != 1 || got[0]["finished"] != false || got[0]["conversations_deleted"] != 1.0 ||
		!strings.Contains(fmt.Sprint(got[0]["stopped_by"]), "Redis") {
		t.Fatalf("the erase that stopped is recorded as %v, want what it deleted and why it stopped", got)
	}
	engine.refuse.Store("")
	root.must(200, "POST", erase, nil, nil)
	if got := erasures(); len(got) != 2 || got[0]["conversations_deleted"] != 1.0 || got[0]["finished"] != nil {
		t.Fatalf("erasures on record %v, want the finished one, newest first, with what it deleted", got)
	}
}
