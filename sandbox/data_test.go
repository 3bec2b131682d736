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
	r, err := e.Execute(context.Background(), k, Request{Code: code, Data: []File{{Name: "in.csv", Data: []byte("a,b")}}})
	if err != nil {
		t.Fatal(err)
	}
	if resultOf(r) != "['a,b', 'denied', 'denied']" || len(r.Artifacts) != 0 {
		t.Fatalf("got %s %+v artifacts %v", resultOf(r), r.Error, r.Artifacts)
	}
	_, err = e.Execute(context.Background(), k, Request{Code: "1", Data: []File{{Name: "../etc/x", Data: nil}}})
	if sandchat.ErrorCode(err) != sandchat.EINVALID {
		t.Fatalf("bad data name: err %v", err)
	}
}

// TestDataTravelsOnce: a run sends only the uploads its session's process does not hold;
// one that left them out after the process went gets ErrDataStale before any code runs.
func TestDataTravelsOnce(t *testing.T) {
	e, _, key := setup(t)
	k := key("once")
	ctx := context.Background()
	exec := func(code string, files ...File) (Result, error) {
		return e.Execute(ctx, k, Request{Code: code, Data: files})
	}
	r, err := exec("import lib\n[open('/data/in.csv').read(), lib.V]",
		File{Name: "in.csv", Version: "1", Data: []byte("a,b")}, File{Name: "lib.py", Version: "1", Data: []byte("V = 1\n")})
	if err != nil || resultOf(r) != "['a,b', 1]" {
		t.Fatalf("first run: %s %v", resultOf(r), err)
	}
	if got := e.DataVersions(k); got["in.csv"] != "1" || got["lib.py"] != "1" || len(got) != 2 {
		t.Fatalf("versions held: %v", got)
	}
	// Unchanged files come without their bytes and are still there.
	r, err = exec("[open('/data/in.csv').read(), lib.V]", File{Name: "in.csv", Version: "1", Size: 3}, File{Name: "lib.py", Version: "1", Size: 6})
	if err != nil || resultOf(r) != "['a,b', 1]" {
		t.Fatalf("unchanged files left out: %s %v %+v", resultOf(r), err, r.Error)
	}
	// A changed module is sent, re-imported; a file left out of the listing is gone.
	r, err = exec("import importlib, lib, os\n[lib.V, sorted(os.listdir('/data'))]", File{Name: "lib.py", Version: "2", Data: []byte("V = 2\n")})
	if err != nil || resultOf(r) != "[2, ['lib.py']]" {
		t.Fatalf("after a change: %s %v %+v", resultOf(r), err, r.Error)
	}
	evictLive(t, e, k)
	if e.DataVersions(k) != nil {
		t.Fatal("versions of an evicted session")
	}
	if _, err := exec("lib.V", File{Name: "lib.py", Version: "2", Size: 6}); !errors.Is(err, ErrDataStale) {
		t.Fatalf("bytes left out for a process that does not hold them: %v, want ErrDataStale", err)
	}
	r, err = exec("lib.V", File{Name: "lib.py", Version: "2", Data: []byte("V = 2\n")})
	if err != nil || resultOf(r) != "2" {
		t.Fatalf("sent again: %s %v %+v %s", resultOf(r), err, r.Error, r.Session.RestoredFrom)
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
		files := []File{{Name: "big.bin", Version: fmt.Sprint(i), Data: big}}
		for n := range 40 {
			files = append(files, File{Name: fmt.Sprintf("part%d.csv", n), Version: fmt.Sprint(i), Data: []byte(fmt.Sprintf("%d,%d\n", i, n))})
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Duration(i%8)*4*time.Millisecond, cancel)
		r, err := e.Execute(ctx, k, Request{Code: "stopped_at = " + fmt.Sprint(i), Data: files})
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
