package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
)

func TestDataIsReadOnly(t *testing.T) {
	e, _, key := setup(t)
	k := key("data")
	code := "r = [open('/data/in.csv').read()]\ntry:\n    open('/data/in.csv', 'w').write('x')\nexcept PermissionError as e:\n    r.append('denied')\ntry:\n    open('/data/new.txt', 'w').write('x')\nexcept PermissionError as e:\n    r.append('denied')\nr"
	r, err := e.Execute(context.Background(), k, Request{Code: code, Data: files(File{Name: "in.csv", Data: []byte("a,b")})})
	if err != nil {
		t.Fatal(err)
	}
	if resultOf(r) != "['a,b', 'denied', 'denied']" || len(r.Artifacts) != 0 {
		t.Fatalf("got %s %+v artifacts %v", resultOf(r), r.Error, r.Artifacts)
	}
	_, err = e.Execute(context.Background(), k, Request{Code: "1", Data: files(File{Name: "../etc/x", Data: nil})})
	if sandchat.ErrorCode(err) != sandchat.EINVALID {
		t.Fatalf("bad data name: err %v", err)
	}
}

// files is a Request.Data that gives fs, whatever the process holds.
func files(fs ...File) func(context.Context, map[string]string) ([]File, error) {
	return func(context.Context, map[string]string) ([]File, error) { return fs, nil }
}

// uploads are a caller's files as Request.Data gives them: the bytes of those whose
// version the process does not hold, as a conversation's store does. It keeps what the
// session said it held each time it asked.
type uploads struct {
	files []File
	held  []map[string]string
}

func (u *uploads) data(_ context.Context, held map[string]string) ([]File, error) {
	u.held = append(u.held, held)
	out := make([]File, 0, len(u.files))
	for _, f := range u.files {
		if held[f.Name] == f.Version {
			f.Size, f.Data = int64(len(f.Data)), nil
		}
		out = append(out, f)
	}
	return out, nil
}

// TestDataTravelsOnce: a run's caller sends only the uploads its session's process does
// not hold, told which it holds under the run's lease; a process brought back holds
// none, and gets them all.
func TestDataTravelsOnce(t *testing.T) {
	e, _, key := setup(t)
	k := key("once")
	ctx := context.Background()
	u := &uploads{}
	exec := func(code string, fs ...File) (Result, map[string]string) {
		t.Helper()
		u.files = fs
		r, err := e.Execute(ctx, k, Request{Code: code, Data: u.data})
		if err != nil {
			t.Fatalf("%q: %v", code, err)
		}
		return r, u.held[len(u.held)-1]
	}
	r, held := exec("import lib\n[open('/data/in.csv').read(), lib.V]",
		File{Name: "in.csv", Version: "1", Data: []byte("a,b")}, File{Name: "lib.py", Version: "1", Data: []byte("V = 1\n")})
	if resultOf(r) != "['a,b', 1]" || held != nil {
		t.Fatalf("first run: %s, the session said it held %v", resultOf(r), held)
	}
	// Unchanged files come without their bytes and are still there.
	r, held = exec("[open('/data/in.csv').read(), lib.V]", File{Name: "in.csv", Version: "1", Data: []byte("a,b")}, File{Name: "lib.py", Version: "1", Data: []byte("V = 1\n")})
	if resultOf(r) != "['a,b', 1]" || held["in.csv"] != "1" || held["lib.py"] != "1" || len(held) != 2 {
		t.Fatalf("unchanged files left out: %s %+v, held %v", resultOf(r), r.Error, held)
	}
	// A changed module is sent, re-imported; a file left out of the listing is gone.
	r, _ = exec("import importlib, lib, os\n[lib.V, sorted(os.listdir('/data'))]", File{Name: "lib.py", Version: "2", Data: []byte("V = 2\n")})
	if resultOf(r) != "[2, ['lib.py']]" {
		t.Fatalf("after a change: %s %+v", resultOf(r), r.Error)
	}
	evictLive(t, e, k)
	r, held = exec("lib.V", File{Name: "lib.py", Version: "2", Data: []byte("V = 2\n")})
	if resultOf(r) != "2" || held != nil {
		t.Fatalf("after an eviction: %s %+v from %s, the session said it held %v", resultOf(r), r.Error, r.Session.RestoredFrom, held)
	}
}

// TestStopDuringDataSync: a Stop that lands while the session takes in a changed /data
// (before the user's code starts) stops the run, and only the run: the interpreter keeps
// working, with its variables. Such stops used to raise KeyboardInterrupt inside the
// driver's own sync, and the session was restarted from its last saved state.
func TestStopDuringDataSync(t *testing.T) {
	e, _, key := setup(t)
	k := key("stop-sync")
	mustSucceed(t, e, k, "kept = 'yes'")
	big := make([]byte, 4<<20)
	for i := range 16 {
		for j := range big {
			big[j] = byte(i + j)
		}
		parts := []File{{Name: "big.bin", Version: fmt.Sprint(i), Data: big}}
		for n := range 40 {
			parts = append(parts, File{Name: fmt.Sprintf("part%d.csv", n), Version: fmt.Sprint(i), Data: []byte(fmt.Sprintf("%d,%d\n", i, n))})
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Duration(i%8)*4*time.Millisecond, cancel)
		r, err := e.Execute(ctx, k, Request{Code: "stopped_at = " + fmt.Sprint(i), Data: func(context.Context, map[string]string) ([]File, error) { return parts, nil }})
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("stop %d: %v", i, err)
		}
		if r.Error != nil && (strings.Contains(r.Error.Message, "restarted") || strings.Contains(r.Error.Message, "last saved state")) {
			t.Fatalf("stop %d broke the interpreter: %s %+v", i, r.Status, r.Error)
		}
	}
	r := mustSucceed(t, e, k, "kept")
	if resultOf(r) != "'yes'" || r.Session.RestoredFrom != FromLive {
		t.Fatalf("after the stops: %s from %s", resultOf(r), r.Session.RestoredFrom)
	}
}
