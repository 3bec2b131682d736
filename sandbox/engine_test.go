package sandbox

import (
	"bytes"
	"context"
	"errors"
	"github.com/sandchat/sandchat/migrations/testenv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
)

func TestExecute(t *testing.T) {
	e, _, key := setup(t)

	// Cases without setup run one after another in one conversation, as a user's cells
	// would: each must leave the session working for the next. Cases with setup get a
	// session of their own.
	tests := []struct {
		name   string
		setup  []string // run first in a fresh session, each must succeed
		code   string
		status string
		check  func(t *testing.T, r Result)
	}{
		{
			name: "trailing expression comes back as repr", code: "x = 41\nprint('hi')\n{'x': x + 1}", status: StatusSuccess,
			check: func(t *testing.T, r Result) {
				if resultOf(r) != "{'x': 42}" || r.Stdout != "hi\n" {
					t.Errorf("result %s stdout %q", resultOf(r), r.Stdout)
				}
			},
		},
		{
			name: "statement without value has no result", code: "y = 1", status: StatusSuccess,
			check: func(t *testing.T, r Result) {
				if r.Result != nil {
					t.Errorf("result %s", resultOf(r))
				}
			},
		},
		{
			name: "stderr is separate", code: "import sys\nprint('err', file=sys.stderr)\nprint('out')", status: StatusSuccess,
			check: func(t *testing.T, r Result) {
				if r.Stdout != "out\n" || r.Stderr != "err\n" {
					t.Errorf("stdout %q stderr %q", r.Stdout, r.Stderr)
				}
			},
		},
		{
			name: "exception has type, message and a traceback of user frames only", code: "def f():\n    return 1/0\nf()", status: StatusError,
			check: func(t *testing.T, r Result) {
				if r.Error == nil || r.Error.Type != "ZeroDivisionError" || r.Error.Message != "division by zero" {
					t.Fatalf("error %+v", r.Error)
				}
				tb := r.Error.Traceback
				if !strings.Contains(tb, "return 1/0") || !strings.Contains(tb, "line 2, in f") {
					t.Errorf("traceback lacks user frames:\n%s", tb)
				}
				for _, internal := range []string{"_pyodide", "<exec>", "<sandchat>", "pyodide/"} {
					if strings.Contains(tb, internal) {
						t.Errorf("traceback shows %s:\n%s", internal, tb)
					}
				}
			},
		},
		{
			name: "syntax error is an error result", code: "def (:", status: StatusError,
			check: func(t *testing.T, r Result) {
				if r.Error.Type != "SyntaxError" {
					t.Errorf("error %+v", r.Error)
				}
			},
		},
		{
			name: "sys.exit is contained", code: "import sys\nsys.exit(3)", status: StatusError,
			check: func(t *testing.T, r Result) {
				if r.Error.Type != "SystemExit" {
					t.Errorf("error %+v", r.Error)
				}
			},
		},
		{
			name:  "functions, classes, generators and closures persist",
			setup: []string{"def counter():\n    n = 0\n    def inc():\n        nonlocal n\n        n += 1\n        return n\n    return inc\nc = counter()\nc()", "class P:\n    def __init__(self, v): self.v = v\np = P(5)", "g = (i * i for i in range(10))\nnext(g)"},
			code:  "[c(), p.v, next(g), next(g)]", status: StatusSuccess,
			check: func(t *testing.T, r Result) {
				if resultOf(r) != "[2, 5, 1, 4]" {
					t.Errorf("result %s", resultOf(r))
				}
			},
		},
		{
			name: "top-level await works", code: "import asyncio\nawait asyncio.sleep(0.01)\n'done'", status: StatusSuccess,
			check: func(t *testing.T, r Result) {
				if resultOf(r) != "'done'" {
					t.Errorf("result %s", resultOf(r))
				}
			},
		},
		{
			name: "unknown import says what is available", code: "import surely_not_a_module", status: StatusError,
			check: func(t *testing.T, r Result) {
				if r.Error.Type != "ModuleNotFoundError" || !strings.Contains(r.Error.Message, "await micropip.install(") {
					t.Errorf("error %+v", r.Error)
				}
			},
		},
		{
			name: "stdout is capped with a marker", code: "print('x' * (3 << 20))", status: StatusSuccess,
			check: func(t *testing.T, r Result) {
				if len(r.Stdout) > (1<<20)+200 || !strings.Contains(r.Stdout, "output truncated") {
					t.Errorf("stdout of %d bytes, tail %q", len(r.Stdout), r.Stdout[max(0, len(r.Stdout)-80):])
				}
			},
		},
		{
			name: "memory cap gives MemoryError and the session survives", setup: []string{"keep = 'still here'"},
			code: "try:\n    b = bytearray(1536 * 1024 ** 2)\nexcept MemoryError:\n    r = 'MemoryError'\n[r, keep]", status: StatusSuccess,
			check: func(t *testing.T, r Result) {
				if resultOf(r) != "['MemoryError', 'still here']" {
					t.Errorf("result %s", resultOf(r))
				}
			},
		},
		{
			name: "a PNG written by pure Python is an image artifact",
			code: pngCode, status: StatusSuccess,
			check: func(t *testing.T, r Result) {
				if len(r.Artifacts) != 2 {
					t.Fatalf("artifacts %+v", r.Artifacts)
				}
				png, csv := r.Artifacts[0], r.Artifacts[1]
				if png.Name != "plots/dot.png" || png.ContentType != "image/png" || !bytes.HasPrefix(png.Data, []byte("\x89PNG")) {
					t.Errorf("png artifact %s %s", png.Name, png.ContentType)
				}
				if csv.Name != "table.csv" || !strings.HasPrefix(csv.ContentType, "text/csv") || string(csv.Data) != "a,b\n1,2\n" {
					t.Errorf("csv artifact %s %s %q", csv.Name, csv.ContentType, csv.Data)
				}
			},
		},
		{
			name: "unchanged files are not artifacts again", setup: []string{"open('same.txt', 'w').write('x')"},
			code: "open('other.txt', 'w').write('y')", status: StatusSuccess,
			check: func(t *testing.T, r Result) {
				if len(r.Artifacts) != 1 || r.Artifacts[0].Name != "other.txt" {
					t.Errorf("artifacts %+v", r.Artifacts)
				}
			},
		},
		{
			name:  "plt.show saves open figures as PNG artifacts",
			setup: []string{fakeMatplotlib},
			code:  "import matplotlib.pyplot as plt\nplt.figure()\nplt.figure()\nplt.show()\nplt.get_fignums()", status: StatusSuccess,
			check: func(t *testing.T, r Result) {
				var names []string
				for _, a := range r.Artifacts {
					if a.ContentType == "image/png" {
						names = append(names, a.Name)
					}
				}
				if strings.Join(names, ",") != "figure-1.png,figure-2.png" || resultOf(r) != "[]" {
					t.Errorf("png artifacts %v, open figures %s", names, resultOf(r))
				}
			},
		},
		{
			name:  "a figure saved then shown is the saved file, shown once",
			setup: []string{fakeMatplotlib},
			code:  "import matplotlib.pyplot as plt\nplt.figure()\nplt.savefig('x.png')\nplt.show()", status: StatusSuccess,
			check: func(t *testing.T, r Result) {
				var names, shown []string
				for _, a := range r.Artifacts {
					names = append(names, a.Name)
				}
				for _, d := range r.Displays {
					if d.Image != nil {
						shown = append(shown, d.Image.Name)
					}
				}
				if strings.Join(names, ",") != "x.png" || strings.Join(shown, ",") != "x.png" {
					t.Errorf("artifacts %v, images shown %v; want x.png once", names, shown)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := key("cells")
			if tt.setup != nil {
				k = key(tt.name)
			}
			for _, s := range tt.setup {
				mustSucceed(t, e, k, s)
			}
			r := run(t, e, k, tt.code)
			if r.Status != tt.status {
				t.Fatalf("status %s, want %s; error %+v; stderr %q", r.Status, tt.status, r.Error, r.Stderr)
			}
			tt.check(t, r)
		})
	}
}

// pngCode writes a 1×1 PNG with zlib and struct only, as a user without Pillow would.
const pngCode = `import zlib, struct, os
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
png = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(b'\x00\xff\x00\x00')) + chunk(b'IEND', b'')
os.makedirs('plots', exist_ok=True)
open('plots/dot.png', 'wb').write(png)
open('table.csv', 'w').write('a,b\n1,2\n')`

// fakeMatplotlib stands in for matplotlib, which cannot be installed here: the import
// hook patches whatever module is imported as matplotlib.pyplot.
const fakeMatplotlib = `import os
os.makedirs('/tmp/fakempl/matplotlib', exist_ok=True)
open('/tmp/fakempl/matplotlib/__init__.py', 'w').write('')
open('/tmp/fakempl/matplotlib/pyplot.py', 'w').write('''
_figs = {}
class Figure:
    def __init__(self, n): self.n = n
    def savefig(self, path, format=None):
        import zlib, struct
        def chunk(k, d): return struct.pack('>I', len(d)) + k + d + struct.pack('>I', zlib.crc32(k + d))
        open(path, 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(b'\\x00\\x00\\x00\\x00')) + chunk(b'IEND', b''))
def figure(n=None):
    n = n or len(_figs) + 1
    return _figs.setdefault(n, Figure(n))
def get_fignums(): return sorted(_figs)
def savefig(path, **kw): return figure(max(_figs) if _figs else None).savefig(path, **kw)
def close(which='all'): _figs.clear()
def show(): raise RuntimeError('no display')
''')
import sys
sys.path.insert(0, '/tmp/fakempl')`

func TestLimits(t *testing.T) {
	e, _, key := setup(t)

	t.Run("code over the size limit is refused", func(t *testing.T) {
		_, err := e.Execute(context.Background(), key("big"), Request{Code: strings.Repeat("#", e.cfg.MaxCode+1)})
		if sandchat.ErrorCode(err) != sandchat.ETOOLARGE {
			t.Fatalf("err %v, want %s", err, sandchat.ETOOLARGE)
		}
	})
	t.Run("timeout above the maximum is refused", func(t *testing.T) {
		_, err := e.Execute(context.Background(), key("tmax"), Request{Code: "1", Timeout: e.cfg.MaxTimeout + time.Second})
		if sandchat.ErrorCode(err) != sandchat.EINVALID {
			t.Fatalf("err %v, want %s", err, sandchat.EINVALID)
		}
	})
	t.Run("timeout interrupts with KeyboardInterrupt and keeps state", func(t *testing.T) {
		k := key("timeout")
		// The limit must come after the cell set x: "set" on stdout says it did. A machine
		// that did not get the cell that far within the limit is given a longer one.
		var r Result
		for _, limit := range []time.Duration{500 * time.Millisecond, 2 * time.Second, 8 * time.Second} {
			mustSucceed(t, e, k, "x = 7")
			var err error
			r, err = e.Execute(context.Background(), k, Request{Code: "x = 8\nprint('set', flush=True)\nwhile True:\n    pass", Timeout: limit})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != StatusTimeout || r.Error.Type != "KeyboardInterrupt" || !strings.Contains(r.Error.Message, "time limit") {
				t.Fatalf("got %s %+v", r.Status, r.Error)
			}
			if r.Stdout == "set\n" {
				break
			}
			t.Logf("interrupted at %s before the cell set x (stdout %q): again with a longer limit", limit, r.Stdout)
		}
		if got := resultOf(mustSucceed(t, e, k, "x")); got != "8" {
			t.Fatalf("x = %s after the interrupt, want the live value 8", got)
		}
	})
	t.Run("a sleep is interrupted at the time limit and keeps state", func(t *testing.T) {
		// Pyodide's own time.sleep never looked at the interrupt: the run outlived its
		// limit, and the kill that ended it lost what the cell had set.
		k := key("sleep")
		for _, code := range []string{"y = 9\nimport time\ntime.sleep(120)", "n = 0\nfor i in range(1200):\n    n += 1\n    time.sleep(0.1)"} {
			r, err := e.Execute(context.Background(), k, Request{Code: code, Timeout: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != StatusTimeout || r.Error == nil || r.Error.Type != "KeyboardInterrupt" || strings.Contains(r.Error.Message, "last saved state") {
				t.Fatalf("%q: got %s %+v, want KeyboardInterrupt in the sleep, the session kept", code, r.Status, r.Error)
			}
		}
		r := mustSucceed(t, e, k, "(y, 0 < n < 1200)")
		if resultOf(r) != "(9, True)" || r.Session.RestoredFrom != FromLive {
			t.Fatalf("after the interrupted sleeps: %s from %s", resultOf(r), r.Session.RestoredFrom)
		}
		r = mustSucceed(t, e, k, "time.sleep(0.01)\ntry:\n    time.sleep(-1)\nexcept ValueError as e:\n    print(e)\ntry:\n    time.sleep('1')\nexcept TypeError:\n    print('TypeError')")
		if r.Stdout != "sleep length must be non-negative\nTypeError\n" {
			t.Fatalf("time.sleep's checks: %q", r.Stdout)
		}
	})
	t.Run("code ignoring the interrupt is stopped and the session restored", func(t *testing.T) {
		k := key("stubborn")
		mustSucceed(t, e, k, "saved = 'yes'")
		// It ignores SIGINT before anything else: what follows, prints included, is never
		// interrupted, however late a slow machine gets it there after the limit.
		code := "import signal, sys\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nlost = 1\nprint('before the limit', flush=True)\nprint('on stderr', file=sys.stderr, flush=True)\nwhile True:\n    pass"
		r, err := e.Execute(context.Background(), k, Request{Code: code, Timeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != StatusTimeout || !strings.Contains(r.Error.Message, "last saved state") {
			t.Fatalf("got %s %+v", r.Status, r.Error)
		}
		// Its process is gone, but what it printed was seen: the answer keeps it.
		if r.Stdout != "before the limit\n" || r.Stderr != "on stderr\n" {
			t.Fatalf("stdout %q stderr %q", r.Stdout, r.Stderr)
		}
		// Back from the last heap and the runs logged since (by replay, when the killed
		// process had not checkpointed yet).
		r = mustSucceed(t, e, k, "[saved, 'lost' in globals()]")
		if resultOf(r) != "['yes', False]" || r.Session.RestoredFrom == FromLive || r.Session.RestoredFrom == FromFresh {
			t.Fatalf("after restart: %s from %s", resultOf(r), r.Session.RestoredFrom)
		}
	})
	t.Run("cancelling the context interrupts the run", func(t *testing.T) {
		// Cancelled once the code runs (a slow machine may take longer than any fixed
		// delay to bring the session up: a cancel then stops nothing that ran).
		ctx, cancel := context.WithCancel(context.Background())
		var once sync.Once
		r, err := e.Execute(ctx, key("cancel"), Request{Code: "import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.01)",
			OnOutput: func(string, string) { once.Do(cancel) }})
		if !errors.Is(err, context.Canceled) || r.Status != StatusTimeout {
			t.Fatalf("err %v status %s error %+v", err, r.Status, r.Error)
		}
	})
	t.Run("an interrupted run keeps what it printed", func(t *testing.T) {
		// Stopped once it has printed twice, whatever the machine's load.
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		seen := 0
		r, err := e.Execute(ctx, key("printed"), Request{Code: "import time\nwhile True:\n    print('spinning', flush=True)\n    time.sleep(0.2)",
			OnOutput: func(_, chunk string) {
				mu.Lock()
				defer mu.Unlock()
				if seen += strings.Count(chunk, "spinning"); seen >= 2 {
					cancel()
				}
			}})
		if !errors.Is(err, context.Canceled) || !strings.Contains(r.Stdout, "spinning\nspinning\n") {
			t.Fatalf("err %v status %s stdout %q", err, r.Status, r.Stdout)
		}
	})
	t.Run("live output arrives in chunks", func(t *testing.T) {
		var mu sync.Mutex
		var got strings.Builder
		chunks := 0
		r, err := e.Execute(context.Background(), key("stream"), Request{
			Code: "import time, sys\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.2)\nprint('e', file=sys.stderr)",
			OnOutput: func(stream, chunk string) {
				mu.Lock()
				got.WriteString(stream + ":" + chunk)
				chunks++
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if s := got.String(); chunks < 2 || strings.ReplaceAll(s, "stdout:", "") != "0\n1\n2\nstderr:e\n" || r.Stdout != "0\n1\n2\n" {
			t.Fatalf("streamed %q in %d chunks", s, chunks)
		}
	})
}

func TestConcurrentRunsOfOneSession(t *testing.T) {
	e, _, key := setup(t)
	k := key("counter")
	mustSucceed(t, e, k, "n = 0")
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			r, err := e.Execute(context.Background(), k, Request{Code: "n += 1"})
			if err == nil && r.Status != StatusSuccess {
				err = errors.New(r.Status)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := resultOf(mustSucceed(t, e, k, "n")); got != "20" {
		t.Fatalf("n = %s, want 20", got)
	}
}

func TestQueueFullIsBusy(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.QueueDepth = 1 })
	k := "busy"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { _, _ = e.Execute(ctx, k, Request{Code: "import time\ntime.sleep(4)"}) }()
	testenv.Eventually(t, 10*time.Second, "the first run holding the lease", func() bool {
		n, _ := testRedis(t).Exists(ctx, skey(e, k, "lease")).Result()
		return n == 1
	})
	go func() { _, _ = e.Execute(ctx, k, Request{Code: "1"}) }()
	testenv.Eventually(t, 10*time.Second, "a second run queued", func() bool {
		n, _ := testRedis(t).ZCard(ctx, skey(e, k, "queue")).Result()
		return n == 2
	})
	_, err := e.Execute(ctx, k, Request{Code: "1"})
	var se *sandchat.Error
	if !errors.As(err, &se) || se.Code != sandchat.EBUSY || se.RetryAfter <= 0 {
		t.Fatalf("err %v, want %s with RetryAfter", err, sandchat.EBUSY)
	}
}

func TestRandomIsReseededPerSession(t *testing.T) {
	e, _, key := setup(t)
	a := resultOf(mustSucceed(t, e, key("a"), "import random\nrandom.random()"))
	b := resultOf(mustSucceed(t, e, key("b"), "import random\nrandom.random()"))
	if a == b {
		t.Fatalf("two new sessions drew the same number %s", a)
	}
}
