package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/migrations/testenv"
)

type filesBundle struct {
	store  *Store
	alice  context.Context // owner of conv
	viewer context.Context // viewer of conv
	conv   int64
}

func setupFiles(t *testing.T) filesBundle {
	t.Helper()
	db := testenv.DB(t)
	ctx := context.Background()
	user := func(name string) context.Context {
		var id int64
		if err := db.QueryRow(ctx, `insert into users (name) values ($1) returning id`, name).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return sandchat.WithUser(ctx, &sandchat.User{ID: id, Name: name})
	}
	b := filesBundle{store: New(db, time.Hour), alice: user("alice"), viewer: user("viewer")}
	c, err := b.store.CreateConversation(b.alice, nil, "files")
	if err != nil {
		t.Fatal(err)
	}
	b.conv = c.ID
	if _, err := b.store.SetMember(b.alice, c.ID, sandchat.UserIDFromContext(b.viewer), sandchat.RoleViewer); err != nil {
		t.Fatal(err)
	}
	return b
}

// held is the state of a conversation's sessions that always holds n bytes.
func held(n int64) conversations.SessionState {
	return func(context.Context, conversations.FileUsage) (int64, error) { return n, nil }
}

func (b filesBundle) dataFiles(t *testing.T) map[string]string {
	t.Helper()
	files, err := b.store.DataFiles(context.Background(), b.conv, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		out[f.Name] = string(f.Data)
	}
	return out
}

func TestFilesUploadPaths(t *testing.T) {
	b := setupFiles(t)

	t.Run("a folder path is kept", func(t *testing.T) {
		ref, replaced, err := b.store.UploadFile(b.alice, b.conv, "reports/2025/q1.csv", "text/csv", []byte("a,b\n"), conversations.Quota{})
		if err != nil || replaced || ref.ID == 0 || ref.Name != "reports/2025/q1.csv" {
			t.Fatalf("upload: %+v %v %v", ref, replaced, err)
		}
		if got := b.dataFiles(t)["reports/2025/q1.csv"]; got != "a,b\n" {
			t.Fatalf("data files %v", b.dataFiles(t))
		}
	})
	t.Run("the same path again replaces the file", func(t *testing.T) {
		first, _, err := b.store.UploadFile(b.alice, b.conv, "notes.txt", "", []byte("one"), conversations.Quota{})
		if err != nil {
			t.Fatal(err)
		}
		second, replaced, err := b.store.UploadFile(b.alice, b.conv, "notes.txt", "", []byte("two!"), conversations.Quota{})
		if err != nil || !replaced || second.ID != first.ID || second.Size != 4 {
			t.Fatalf("re-upload: %+v replaced=%v err=%v (first %+v)", second, replaced, err, first)
		}
		files, err := b.store.Files(b.alice, b.conv)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range files {
			if f.Name == "notes.txt" {
				n++
			}
		}
		if n != 1 || b.dataFiles(t)["notes.txt"] != "two!" {
			t.Fatalf("%d rows named notes.txt, content %q", n, b.dataFiles(t)["notes.txt"])
		}
	})
	t.Run("bad paths are refused", func(t *testing.T) {
		// The rule itself is sandchat.CheckDataPath's, tested there.
		for _, p := range []string{"../etc/passwd", "a//b.csv", ""} {
			if _, _, err := b.store.UploadFile(b.alice, b.conv, p, "", []byte("x"), conversations.Quota{}); sandchat.ErrorCode(err) != sandchat.EINVALID {
				t.Errorf("%q: %v", p, err)
			}
		}
	})
	t.Run("a path cannot be a file and a folder", func(t *testing.T) {
		for _, p := range []string{"reports/2025", "reports/2025/q1.csv/more.csv"} {
			if _, _, err := b.store.UploadFile(b.alice, b.conv, p, "", []byte("x"), conversations.Quota{}); sandchat.ErrorCode(err) != sandchat.ECONFLICT {
				t.Errorf("%q: %v", p, err)
			}
		}
	})
	t.Run("viewers cannot upload", func(t *testing.T) {
		if _, _, err := b.store.UploadFile(b.viewer, b.conv, "v.csv", "", []byte("x"), conversations.Quota{}); sandchat.ErrorCode(err) != sandchat.EFORBIDDEN {
			t.Fatalf("viewer upload: %v", err)
		}
	})
}

func TestFilesLimitsStateSizes(t *testing.T) {
	b := setupFiles(t)
	_, _, err := b.store.UploadFile(b.alice, b.conv, "input.csv", "", make([]byte, 25<<19), conversations.Quota{}) // 12.5 MiB
	if sandchat.ErrorCode(err) != sandchat.ETOOLARGE || sandchat.ErrorMessage(err) != "input.csv is 12.5 MiB; uploads are limited to 10 MiB per file." {
		t.Fatalf("one file over the limit: %v", err)
	}
	chunk := make([]byte, 10<<20)
	for i := range 6 {
		if _, _, err := b.store.UploadFile(b.alice, b.conv, "part"+string(rune('a'+i))+".bin", "", chunk, conversations.Quota{}); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = b.store.UploadFile(b.alice, b.conv, "big.bin", "", make([]byte, 5<<20), conversations.Quota{})
	want := "This conversation's uploads take 60 MiB of the 64 MiB uploads may take; big.bin (5 MiB) does not fit."
	if sandchat.ErrorCode(err) != sandchat.ETOOLARGE || !strings.HasPrefix(sandchat.ErrorMessage(err), want) {
		t.Fatalf("over the uploads' total: %v, want %q", err, want)
	}
	// Replacing a file frees its own size first.
	if _, replaced, err := b.store.UploadFile(b.alice, b.conv, "parta.bin", "", chunk, conversations.Quota{}); err != nil || !replaced {
		t.Fatalf("replacing within the quota: %v %v", replaced, err)
	}

	t.Run("an upload past the quota with the sessions' state names every size", func(t *testing.T) {
		_, _, err := b.store.UploadFile(b.alice, b.conv, "more.bin", "", make([]byte, 1<<20), conversations.Quota{Limit: 64 << 20, State: held(7 << 19)})
		want := "This conversation's storage is full: uploads 60 MiB + artifacts 0 bytes + Python state 3.5 MiB = 63.5 MiB of its 64 MiB quota; more.bin (1 MiB) does not fit."
		if sandchat.ErrorCode(err) != sandchat.ETOOLARGE || !strings.HasPrefix(sandchat.ErrorMessage(err), want) {
			t.Fatalf("got %v, want %q", err, want)
		}
	})

	t.Run("artifacts past the quota say which and why", func(t *testing.T) {
		arts := []sandchat.Artifact{{Name: "small.txt", Data: []byte("ok")}, {Name: "huge.bin", Data: make([]byte, 3<<20)}}
		files, err := b.store.FileUsage(context.Background(), b.conv)
		if err != nil {
			t.Fatal(err)
		}
		keep, stderr, err := capArtifacts(context.Background(), files, arts, "", conversations.Quota{Limit: 64 << 20, State: held(2 << 20)})
		if err != nil {
			t.Fatal(err)
		}
		want := "uploads 60 MiB + artifacts 2 bytes + Python state 2 MiB = 62.0 MiB of its 64 MiB quota"
		if len(keep) != 1 || keep[0].Name != "small.txt" || !strings.Contains(stderr, "huge.bin (3 MiB)") || !strings.Contains(stderr, want) {
			t.Fatalf("kept %d, stderr %q", len(keep), stderr)
		}
	})
}

func TestFilesExecutionDisplays(t *testing.T) {
	b := setupFiles(t)
	ctx := b.alice
	png := []byte("\x89PNG fake bytes, stored as a file")
	ex := conversations.Execution{ConversationID: b.conv, SessionKey: "conv", Code: "display(x)"}
	id, err := b.store.BeginExecution(ctx, ex)
	if err != nil {
		t.Fatal(err)
	}
	ex.Outcome = sandchat.RunOutcome{Status: "success",
		Artifacts: []sandchat.Artifact{{Name: "display-1.png", ContentType: "image/png", Data: png}},
		Displays: []sandchat.Display{
			{Kind: "display", Text: "Table(42)", HTML: "<table><tr><td>42</td></tr></table>"},
			{Kind: "display", Text: "<Picture>", Image: &sandchat.DisplayImage{Name: "display-1.png", ContentType: "image/png", Width: 3, Height: 2, Size: int64(len(png))}},
			{Kind: "result", Text: "nul\x00inside", JSON: json.RawMessage(`{"k":"a\u0000b"}`)},
		}}
	refs, _, err := b.store.FinishExecution(ctx, id, ex, "")
	if err != nil || len(refs) != 1 {
		t.Fatalf("finish: %v %+v", err, refs)
	}
	type item struct {
		Kind, Text, HTML string
		Image            *struct {
			Name   string
			FileID int64 `json:"file_id"`
			Width  int
		}
	}
	check := func(t *testing.T, raw json.RawMessage) {
		t.Helper()
		var items []item
		if err := json.Unmarshal(raw, &items); err != nil {
			t.Fatal(err)
		}
		if len(items) != 3 || items[0].HTML != "<table><tr><td>42</td></tr></table>" || items[1].Image == nil ||
			items[1].Image.FileID != refs[0].ID || items[1].Image.Width != 3 || items[2].Text != "nul\uFFFDinside" {
			t.Fatalf("stored displays %s", raw)
		}
		if bytes.Contains(raw, []byte("PNG fake")) {
			t.Fatalf("image bytes stored with the displays: %s", raw)
		}
	}
	t.Run("one execution", func(t *testing.T) {
		e, err := b.store.Execution(b.viewer, b.conv, id)
		if err != nil {
			t.Fatal(err)
		}
		check(t, e.Displays)
	})
	t.Run("the list", func(t *testing.T) {
		list, err := b.store.Executions(b.viewer, b.conv)
		if err != nil || len(list) != 1 {
			t.Fatalf("%v %+v", err, list)
		}
		check(t, list[0].Displays)
	})
	t.Run("a run without displays lists none", func(t *testing.T) {
		id2, err := b.store.BeginExecution(ctx, ex)
		if err != nil {
			t.Fatal(err)
		}
		if e, err := b.store.Execution(ctx, b.conv, id2); err != nil || string(e.Displays) != "[]" {
			t.Fatalf("pending run: %v %s", err, e.Displays)
		}
	})
}

func TestFilesDisplaysBounded(t *testing.T) {
	big := strings.Repeat("<td>x</td>", 60_000) // 600 KB per item
	var items []sandchat.Display
	for range 5 {
		items = append(items, sandchat.Display{Kind: "display", Text: strings.Repeat("t", 5000), HTML: big})
	}
	raw, err := displaysJSON(items, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > MaxStoredDisplayBytes+8<<10 {
		t.Fatalf("stored %d bytes for displays, bound %d", len(raw), MaxStoredDisplayBytes)
	}
	var got []struct {
		HTML      string
		Text      string
		Truncated bool
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[0].HTML != big || got[0].Truncated || !got[4].Truncated || got[4].HTML != "" || !strings.HasPrefix(got[4].Text, "ttt") {
		t.Fatalf("items kept: %d, first truncated %v, last truncated %v", len(got), got[0].Truncated, got[4].Truncated)
	}
}

// TestFilesDataVersions: a run's caller gets the bytes of an upload only when it does
// not hold that version already; replacing a file gives it a new version.
func TestFilesDataVersions(t *testing.T) {
	b := setupFiles(t)
	ctx := context.Background()
	for _, name := range []string{"a.txt", "b.txt"} {
		if _, _, err := b.store.UploadFile(b.alice, b.conv, name, "", []byte(name), conversations.Quota{}); err != nil {
			t.Fatal(err)
		}
	}
	byName := func(have map[string]string) map[string]conversations.DataFile {
		t.Helper()
		files, err := b.store.DataFiles(ctx, b.conv, have)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]conversations.DataFile{}
		for _, f := range files {
			out[f.Name] = f
		}
		return out
	}
	first := byName(nil)
	if len(first) != 2 || string(first["a.txt"].Data) != "a.txt" || first["a.txt"].Version == "" || first["b.txt"].Size != 5 {
		t.Fatalf("first listing: %+v", first)
	}
	held := map[string]string{"a.txt": first["a.txt"].Version, "b.txt": first["b.txt"].Version}
	if again := byName(held); again["a.txt"].Data != nil || again["b.txt"].Data != nil || again["a.txt"].Version != held["a.txt"] {
		t.Fatalf("nothing changed, yet bytes came: %+v", again)
	}
	if _, _, err := b.store.UploadFile(b.alice, b.conv, "a.txt", "", []byte("new a"), conversations.Quota{}); err != nil {
		t.Fatal(err)
	}
	after := byName(held)
	if string(after["a.txt"].Data) != "new a" || after["a.txt"].Version == held["a.txt"] || after["b.txt"].Data != nil {
		t.Fatalf("after replacing a.txt: %+v", after)
	}
}

// TestFilesResetBeforeARun: a reset recorded before a run (the engine reset the session
// that run found broken) keeps that run, and those after it, for replay; a user's reset
// keeps none of the runs so far.
func TestFilesResetBeforeARun(t *testing.T) {
	b := setupFiles(t)
	ctx := b.alice
	ran := func(code string) int64 {
		ex := conversations.Execution{ConversationID: b.conv, SessionKey: "conv", Code: code}
		id, err := b.store.BeginExecution(ctx, ex)
		if err != nil {
			t.Fatal(err)
		}
		ex.Outcome = sandchat.RunOutcome{Status: "success"}
		if _, _, err := b.store.FinishExecution(ctx, id, ex, ""); err != nil {
			t.Fatal(err)
		}
		return id
	}
	codes := func() string {
		runs, err := b.store.SessionRuns(ctx, "conv")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range runs {
			out = append(out, r.Code)
		}
		return strings.Join(out, " ")
	}
	ran("a")
	id := ran("b")
	ran("c")
	if err := b.store.RecordReset(ctx, b.conv, "conv", id); err != nil {
		t.Fatal(err)
	}
	if got := codes(); got != "b c" {
		t.Fatalf("after a reset before b: %q", got)
	}
	if err := b.store.RecordReset(ctx, b.conv, "conv", 0); err != nil {
		t.Fatal(err)
	}
	if got := codes(); got != "" {
		t.Fatalf("after a user's reset: %q", got)
	}
}
