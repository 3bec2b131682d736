package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
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
