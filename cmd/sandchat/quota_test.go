package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

type storageJSON struct {
	Uploads, Artifacts, State, Used, Quota int64
}

func (c *client) storage(conv int64) storageJSON {
	c.t.Helper()
	var st storageJSON
	c.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/storage", conv), nil, &st)
	return st
}

// TestConversationQuota: one quota holds a conversation's uploads, the files its runs
// made and its Python state together, and every way in refuses what would pass it with
// the sizes: an upload (413), a run's files (not kept, stderr says which), a run's state
// save (the engine's refusal names the limit, and a line names the quota). Members see
// the usage; strangers do not.
func TestConversationQuota(t *testing.T) {
	t.Parallel()
	m := newEnv(t).sandboxNode(func(c *Config, _ *Main) { c.ConversationQuota = 8 << 20 })
	alice, _ := m.user(t, "alice", false)
	viewer, viewerID := m.user(t, "viewer", false)
	stranger, _ := m.user(t, "stranger", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": viewerID, "role": "viewer"}, nil)
	storagePath := fmt.Sprintf("/api/v1/conversations/%d/storage", conv)

	if code, body := alice.uploadAt(conv, "big.bin", "", strings.Repeat("u", 6<<20)); code != 201 {
		t.Fatalf("upload within the quota: %d %s", code, body)
	}

	t.Run("members see the usage, strangers nothing", func(t *testing.T) {
		if st := viewer.storage(conv); st != (storageJSON{Uploads: 6 << 20, Used: 6 << 20, Quota: 8 << 20}) {
			t.Fatalf("viewer sees %+v", st)
		}
		stranger.must(404, "GET", storagePath, nil, nil)
		stranger.must(404, "GET", "/api/v1/conversations/999999/storage", nil, nil)
	})

	t.Run("a run within the quota is saved and counted", func(t *testing.T) {
		r := alice.run(conv, "x = 41\nx + 1")
		if r.Status != "success" || strings.Contains(r.Stderr, "not saved") || r.Session.Version == 0 {
			t.Fatalf("run within the quota: %+v", r)
		}
		st := alice.storage(conv)
		if st.State <= 0 || st.Uploads != 6<<20 || st.Used != st.Uploads+st.Artifacts+st.State || st.Quota != 8<<20 {
			t.Fatalf("usage after a run: %+v", st)
		}
		t.Logf("state after a small run: %d bytes", st.State)
	})

	t.Run("an upload past the quota is refused with the sizes", func(t *testing.T) {
		code, body := alice.uploadAt(conv, "more.bin", "", strings.Repeat("m", 3<<20))
		d := problem(t, body)
		want := regexp.MustCompile(`^This conversation's storage is full: uploads 6 MiB \+ artifacts 0 bytes \+ Python state [0-9.]+ (bytes|KiB|MiB) = [0-9.]+ MiB of its 8 MiB quota; more\.bin \(3 MiB\) does not fit\.`)
		if code != 413 || !want.MatchString(d) {
			t.Fatalf("upload past the quota: %d %q", code, d)
		}
	})

	t.Run("a state save past the quota is refused and says so", func(t *testing.T) {
		r := alice.run(conv, "import os\nopen('blob.bin', 'wb').write(os.urandom(4 << 20))\ny = 2")
		t.Logf("%+v", r)
		if r.Status != "success" || !strings.Contains(r.Stderr, "[sandbox] session state not saved: the session's saved state would be") ||
			!strings.Contains(r.Stderr, "this conversation's 8 MiB storage quota leaves for this session: uploads 6 MiB + artifacts 0 bytes") {
			t.Fatalf("state save past the quota: %+v", r)
		}
		// The file was not kept as an artifact either: it does not fit.
		if len(r.Artifacts) != 0 || !strings.Contains(r.Stderr, "[sandbox] files not kept: this conversation's storage is full (uploads 6 MiB + artifacts 0 bytes") ||
			!strings.Contains(r.Stderr, "blob.bin (4 MiB)") {
			t.Fatalf("artifact past the quota: %+v", r)
		}
		// Operators see both refusals, and the upload's before them.
		fams := scrape(t, m)
		for what, want := range map[string]float64{"upload": 1, "state": 1, "artifacts": 1} {
			if v, _ := series(fams, "sandchat_quota_refusals_total", "what", what); v != want {
				t.Errorf("sandchat_quota_refusals_total{what=%q} = %v, want %v", what, v, want)
			}
		}
	})

	t.Run("files past the quota are not kept, and the model is told which", func(t *testing.T) {
		other := alice.createConversation(agent.ID)
		if code, body := alice.uploadAt(other, "input.bin", "", strings.Repeat("i", 5<<20)); code != 201 {
			t.Fatalf("upload: %d %s", code, body)
		}
		// The session keeps table.csv (its state fits in the 3 MiB left), but as a file
		// from the run it would be counted a second time, past the quota.
		turn := alice.post(other, py("open('ok.txt', 'w').write('ok')\nopen('table.csv', 'w').write('t' * (3 << 19))"))
		if tj := alice.finishTurn(other, turn); tj.Status != "completed" {
			t.Fatalf("turn %+v", tj)
		}
		var runs []struct {
			Status, Stderr string
			Artifacts      []struct{ Name string }
		}
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", other), nil, &runs)
		if len(runs) != 1 || runs[0].Status != "success" || len(runs[0].Artifacts) != 1 || runs[0].Artifacts[0].Name != "ok.txt" ||
			strings.Contains(runs[0].Stderr, "not saved") ||
			!regexp.MustCompile(`\[sandbox\] files not kept: this conversation's storage is full \(uploads 5 MiB \+ artifacts 2 bytes \+ Python state [0-9.]+ MiB = [0-9.]+ MiB of its 8 MiB quota\), and these do not fit \(delete files or reset the Python session to make room\): table\.csv \(1\.5 MiB\)`).MatchString(runs[0].Stderr) {
			t.Fatalf("recorded run %+v", runs)
		}
		var msgs []messageJSON
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/messages", other), nil, &msgs)
		var told bool
		for _, msg := range msgs {
			told = told || (msg.Role == "tool" && strings.Contains(msg.Content, "files not kept") && strings.Contains(msg.Content, "table.csv (1.5 MiB)"))
		}
		if !told {
			t.Fatalf("the model was not told which files were not kept: %+v", msgs)
		}
		if st := alice.storage(other); st.Artifacts != 2 || st.State < 3<<19 || st.Used > st.Quota {
			t.Fatalf("usage %+v", st)
		}
	})
}

// keptFor is what Postgres and Redis hold for a conversation: the size of its files,
// and the saved state of each session its runs used (the engine's own count, hot and
// cold tiers), read straight from the stores, so it holds after the node is gone too.
func (e *testEnv) keptFor(cfg Config, conv int64) (files, state int64) {
	t := e.t
	t.Helper()
	ctx := context.Background()
	db, err := pgx.Connect(ctx, e.databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	var keys []string
	if err := db.QueryRow(ctx, `select coalesce(sum(size), 0), (select coalesce(array_agg(distinct session_key), '{}') from executions where conversation_id = $1)
		from files where conversation_id = $1`, conv).Scan(&files, &keys); err != nil {
		t.Fatal(err)
	}
	st, err := engineStore(e.rdb, cfg.Sandbox.Engine)
	if err != nil {
		t.Fatal(err)
	}
	if state, err = st.Bytes(ctx, append(keys, fmt.Sprintf("conv:%d", conv))...); err != nil {
		t.Fatal(err)
	}
	return files, state
}

// TestQuotaHoldsAtEveryMoment: what a conversation keeps never passes its quota, however
// its writes interleave: an upload that lands while a run works and the run's state
// save after it, an upload between a run's answer and the checkpoint of its heap, a
// swarm child's session saved beside its parent's before the parent's heap is. Each
// write is checked against what is kept at its own moment; the one that does not fit
// is refused and says why, and the state saved before it stays.
func TestQuotaHoldsAtEveryMoment(t *testing.T) {
	t.Parallel()
	const quota = 8 << 20
	e := newEnv(t)
	m := e.sandboxNode(func(c *Config, _ *Main) {
		c.ConversationQuota = quota
		c.Sandbox.PerAgentSessions = true
		// Heaps are saved at shutdown here, after the writes the test places before them.
		c.Sandbox.Engine.CheckpointDelay = time.Hour
	})
	cfg := m.Config
	alice, _ := m.user(t, "alice", false)
	child := alice.createAgent(map[string]any{"name": "helper", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	lead := alice.createAgent(map[string]any{"name": "lead", "children": []int64{child.ID},
		"internal_tools": map[string]bool{"pyodide_sandbox": true, "swarm_mode": true}})
	upload := func(conv int64, name string, size int) (int, []byte) {
		return alice.uploadAt(conv, name, "", strings.Repeat("u", size))
	}
	const fiveMiB = 5 << 20

	duringRun := alice.createConversation(lead.ID)
	t.Run("an upload during a run, then the run's save", func(t *testing.T) {
		ws := alice.socket()
		ws.subscribe(duringRun, nil)
		// The run writes 5 MiB its save would keep, then works on until it is stopped,
		// and ends well (it catches the interrupt), so its state is saved then.
		turn := alice.post(duringRun, py("import os, time\nopen('work.bin', 'wb').write(os.urandom(5 << 20))\nprint('ready', flush=True)\n"+
			"try:\n    while True:\n        time.sleep(30)\nexcept KeyboardInterrupt:\n    pass"))
		for f := ws.expect2(); ; f = ws.expect2() {
			var d struct{ Text string }
			_ = json.Unmarshal(f.Data, &d)
			if f.Type == "tool.output" && strings.Contains(d.Text, "ready") {
				break
			}
		}
		if code, body := upload(duringRun, "input.bin", fiveMiB); code != 201 {
			t.Fatalf("an upload while the run's state is small: %d %s", code, body)
		}
		alice.must(202, "POST", fmt.Sprintf("/api/v1/conversations/%d/turns/%d/cancel", duringRun, turn), nil, nil)
		alice.finishTurn(duringRun, turn)
		var runs []struct{ Status, Stderr string }
		alice.must(200, "GET", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", duringRun), nil, &runs)
		if len(runs) != 1 || runs[0].Status != "success" ||
			!strings.Contains(runs[0].Stderr, "[sandbox] session state not saved: the session's saved state would be") ||
			!strings.Contains(runs[0].Stderr, "[sandbox] that limit is what this conversation's 8 MiB storage quota leaves for this session: uploads 5 MiB + artifacts 0 bytes + Python state of its other sessions 0 bytes.") {
			t.Fatalf("the run's save after the upload: %+v", runs)
		}
		if st := alice.storage(duringRun); st.Used > st.Quota {
			t.Fatalf("after the run: %+v", st)
		}
	})

	beforeCheckpoint := alice.createConversation(lead.ID)
	t.Run("an upload between an answer and its checkpoint", func(t *testing.T) {
		// The answer saves the cell; the 5 MiB heap is saved by a checkpoint later.
		if status, answer := alice.say(beforeCheckpoint, py("import os\nblob = os.urandom(5 << 20)\nlen(blob)")); status != "completed" || !strings.Contains(answer, "5242880") {
			t.Fatalf("run: %s %q", status, answer)
		}
		if code, body := upload(beforeCheckpoint, "input.bin", fiveMiB); code != 201 {
			t.Fatalf("an upload while the session's saved state is small: %d %s", code, body)
		}
	})

	swarm := alice.createConversation(lead.ID)
	t.Run("a swarm child's session beside its parent's", func(t *testing.T) {
		if status, answer := alice.say(swarm, py("import os\nblob = os.urandom(5 << 20)\nlen(blob)")); status != "completed" || !strings.Contains(answer, "5242880") {
			t.Fatalf("the lead's run: %s %q", status, answer)
		}
		if status, answer := alice.say(swarm, "@helper "+py("import os\nopen('part.bin', 'wb').write(os.urandom(5 << 20))")); status != "completed" || strings.Contains(answer, "not saved") {
			t.Fatalf("the child's run, while the lead's saved state is small: %s %q", status, answer)
		}
		// An upload now meets both sessions' state, and says so.
		code, body := upload(swarm, "input.bin", 3<<20)
		if d := problem(t, body); code != 413 || !regexp.MustCompile(`^This conversation's storage is full: uploads 0 bytes \+ artifacts 0 bytes \+ Python state 5\.[0-9] MiB = 5\.[0-9] MiB of its 8 MiB quota; input\.bin \(3 MiB\) does not fit\.`).MatchString(d) {
			t.Fatalf("an upload past the quota: %d %q", code, d)
		}
	})

	// Shutdown saves every live session's heap: each checkpoint meets the quota as it is now.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for name, conv := range map[string]int64{"upload during a run": duringRun, "upload before a checkpoint": beforeCheckpoint, "swarm": swarm} {
		files, state := e.keptFor(cfg, conv)
		t.Logf("%s: files %d + state %d = %d bytes kept", name, files, state, files+state)
		if files+state > quota {
			t.Errorf("%s: Postgres and Redis keep %d bytes of files and %d of Python state for the conversation, %d in all, past its %d-byte quota",
				name, files, state, files+state, quota)
		}
	}
}
