package sandbox

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The working directory a session keeps: every tree Python can make there comes back
// after a save and a restore as it was (its files, directories and links; modes are not
// kept), and no tree keeps the engine from saving or restoring it.

// treeHelpers are the operations a generated cell makes, each doing what it can: an
// operation that fails (a parent that is a file, a folder of mode 0, a loop of links)
// leaves the tree as it is, as it would in a user's code.
const treeHelpers = `import os, shutil
R = '/home/pyodide'
def P(p): return os.path.join(R, p)
def _clear(p):
    if os.path.islink(p) or (os.path.lexists(p) and not os.path.isdir(p)): os.unlink(p)
    elif os.path.isdir(p): shutil.rmtree(p)
def _try(f):
    try: f()
    except (OSError, ValueError): pass
def mk(p):
    def f():
        if os.path.lexists(P(p)) and (os.path.islink(P(p)) or not os.path.isdir(P(p))): _clear(P(p))
        os.makedirs(P(p), exist_ok=True)
    _try(f)
def wr(p, data):
    def f():
        os.makedirs(os.path.dirname(P(p)), exist_ok=True)
        if os.path.lexists(P(p)) and (os.path.islink(P(p)) or os.path.isdir(P(p))): _clear(P(p))
        with open(P(p), 'wb') as w: w.write(data)
    _try(f)
def ln(target, p):
    def f():
        os.makedirs(os.path.dirname(P(p)), exist_ok=True)
        if os.path.lexists(P(p)): _clear(P(p))
        os.symlink(target, P(p))
    _try(f)
def rm(p): _try(lambda: _clear(P(p)))
def mv(a, b): _try(lambda: os.rename(P(a), P(b)))
def mode(p, m): _try(lambda: os.chmod(P(p), m))
def cd(p): _try(lambda: os.chdir(P(p)))
def out(p, data):
    def f():
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, 'wb') as w: w.write(data)
    _try(f)
`

// treeListing prints the working directory as the test compares it: each entry's kind,
// a file's contents' hash, a link's target, and the current directory (a current
// directory that no longer exists is the working directory, where a restore puts it).
// It reads through modes as the engine does, and keeps no JavaScript object (which would
// keep the heap from being saved).
const treeListing = `def _listing():
    import os, hashlib, json, pyodide_js
    fs = pyodide_js.FS
    was = fs.ignorePermissions
    fs.ignorePermissions = True
    try:
        root, tree = '/home/pyodide', {}
        if os.path.isdir(root) and not os.path.islink(root):
            for d, dirs, files in os.walk(root):
                for n in dirs + files:
                    p = os.path.join(d, n)
                    r = os.path.relpath(p, root)
                    if os.path.islink(p): tree[r] = 'link ' + os.readlink(p)
                    elif os.path.isdir(p): tree[r] = 'dir'
                    elif os.path.isfile(p):
                        with open(p, 'rb') as f: tree[r] = 'file ' + hashlib.sha256(f.read()).hexdigest()[:16]
        cwd = os.getcwd()
        if not os.path.isdir(cwd): cwd = root
    finally:
        fs.ignorePermissions = was
        del fs
    return json.dumps({'tree': tree, 'cwd': cwd})
print(_listing())
del _listing`

// oddNames are names people and programs give files, and names that are hard on code
// that handles paths.
var oddNames = []string{"a", "b", "c", "data", "a b", " lead", "trail ", "ünïcödé", "日本語", "emoji 😀", "x\ny", "tab\tname",
	"..x", "...", ".hidden", "-", "--flag", "q?*", "%2e", "semi;colon", "back\\slash", "'quote", "\"dq", "a.b.c", "CON", "#hash", "~tilde", "$HOME"}

// treeGen writes cells of random operations on a working directory. Its paths are drawn
// from few names, so that operations meet: a file becomes a folder, a link stands where
// a folder was, a folder holding the current directory is moved.
type treeGen struct{ r *rand.Rand }

func (g treeGen) path() string {
	n := 1 + g.r.IntN(3)
	segs := make([]string, n)
	for i := range segs {
		if g.r.IntN(3) == 0 {
			segs[i] = oddNames[g.r.IntN(len(oddNames))]
		} else {
			segs[i] = oddNames[g.r.IntN(4)]
		}
	}
	return strings.Join(segs, "/")
}

func (g treeGen) data() string {
	if g.r.IntN(12) == 0 {
		// Past the hot tier's bound for a file: kept in the cold tier.
		return fmt.Sprintf("bytes((i * %d) %% 251 for i in range(%d))", 1+g.r.IntN(250), 80<<10)
	}
	b := make([]byte, []int{0, 1, 7, 64, 300}[g.r.IntN(5)])
	for i := range b {
		b[i] = byte(g.r.Uint32())
	}
	return "bytes.fromhex('" + hex.EncodeToString(b) + "')"
}

func (g treeGen) cell(ops int) string {
	var c strings.Builder
	c.WriteString(treeHelpers)
	q := strconv.Quote
	for range ops {
		p := q(g.path())
		switch g.r.IntN(14) {
		case 0, 1, 2:
			fmt.Fprintf(&c, "wr(%s, %s)\n", p, g.data())
		case 3, 4:
			fmt.Fprintf(&c, "mk(%s)\n", p)
		case 5:
			target := []string{g.path(), "../" + g.path(), "/home/pyodide/" + g.path(), "/tmp", "/nonexistent/x", ".", ".."}[g.r.IntN(7)]
			fmt.Fprintf(&c, "ln(%s, %s)\n", q(target), p)
		case 6, 7:
			fmt.Fprintf(&c, "rm(%s)\n", p)
		case 8:
			fmt.Fprintf(&c, "mv(%s, %s)\n", p, q(g.path()))
		case 9:
			fmt.Fprintf(&c, "mode(%s, 0o%o)\n", p, []int{0, 0o444, 0o555, 0o700, 0o111}[g.r.IntN(5)])
		case 10:
			fmt.Fprintf(&c, "cd(%s)\n", []string{p, q("")}[g.r.IntN(2)])
		case 11:
			deep := make([]string, 20+g.r.IntN(60))
			for i := range deep {
				deep[i] = oddNames[g.r.IntN(4)]
			}
			fmt.Fprintf(&c, "wr(%s, %s)\n", q(strings.Join(deep, "/")), g.data())
		case 12:
			fmt.Fprintf(&c, "mk(%s)\nmk(%s)\n", p, q(g.path()))
		default:
			fmt.Fprintf(&c, "out(%s, %s)\n", q([]string{"/tmp/", "/home/other/", "/lib/"}[g.r.IntN(3)]+g.path()), g.data())
		}
	}
	// The current directory: moved into a folder, then maybe that folder taken away (its
	// contents: the interpreter keeps it), moved, or replaced by a file.
	if d := q(g.path()); g.r.IntN(4) > 0 {
		fmt.Fprintf(&c, "mk(%s)\ncd(%s)\n", d, d)
		switch g.r.IntN(4) {
		case 1:
			fmt.Fprintf(&c, "rm(%s)\n", d)
		case 2:
			fmt.Fprintf(&c, "mv(%s, %s)\n", q(strings.Split(strings.Trim(d, `"`), "/")[0]), q(g.path()))
		case 3:
			fmt.Fprintf(&c, "rm(%s)\nwr(%s, b'')\n", d, d)
		}
	}
	c.WriteString("None")
	return c.String()
}

type treeView struct {
	Tree map[string]string `json:"tree"`
	Cwd  string            `json:"cwd"`
	from string            // how the session came back for the listing
}

func listTree(t *testing.T, e *Engine, k string) treeView {
	t.Helper()
	r := mustSucceed(t, e, k, treeListing)
	v := treeView{from: r.Session.RestoredFrom}
	if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil {
		t.Fatalf("listing: %v: %.300q", err, r.Stdout)
	}
	return v
}

// diffTrees says how got differs from want, or "".
func diffTrees(want, got treeView) string {
	var d []string
	for _, p := range slices.Sorted(maps.Keys(want.Tree)) {
		if g, ok := got.Tree[p]; !ok {
			d = append(d, fmt.Sprintf("lost %q (%s)", p, want.Tree[p]))
		} else if g != want.Tree[p] {
			d = append(d, fmt.Sprintf("%q: %s, was %s", p, g, want.Tree[p]))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(got.Tree)) {
		if _, ok := want.Tree[p]; !ok {
			d = append(d, fmt.Sprintf("new %q (%s)", p, got.Tree[p]))
		}
	}
	if want.Cwd != got.Cwd {
		d = append(d, fmt.Sprintf("current directory %q, was %q", got.Cwd, want.Cwd))
	}
	return strings.Join(d, "; ")
}

// TestTreesSurviveRestore: random trees built from Python, changed over several runs
// (files, empty and deep folders, links to files, folders, outside and nowhere, odd
// names, modes that lock the engine out, folders and files replacing each other, the
// current directory moved or taken away, files outside the working directory), come
// back exactly after each save and restore: from the saved heap, and by replay of the
// session's cells.
func TestTreesSurviveRestore(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{modeSnapshot, modeReplay} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e, _ := newEngine(t, func(c *Config) { c.ForceReplay, c.CheckpointDelay = mode == modeReplay, time.Hour })
			for seed := range uint64(2) {
				k := fmt.Sprintf("tree-%d", seed)
				g := treeGen{rand.New(rand.NewPCG(seed, 43))}
				rounds := 3
				if mode == modeReplay {
					rounds = 2
				}
				for round := range rounds {
					cell := g.cell(30)
					if r := run(t, e, k, cell); r.Status != StatusSuccess {
						t.Fatalf("seed %d round %d: the cell: %s %+v", seed, round, r.Status, r.Error)
					}
					want := listTree(t, e, k)
					evictSaved(t, e, k)
					got := listTree(t, e, k)
					if d := diffTrees(want, got); d != "" {
						t.Fatalf("seed %d round %d: after a restore (%d entries): %s", seed, round, len(want.Tree), d)
					}
					if got.from != mode {
						t.Fatalf("seed %d round %d: restored from %s, want %s", seed, round, got.from, mode)
					}
					t.Logf("seed %d round %d: %d entries, current directory %q: the same after a restore", seed, round, len(want.Tree), want.Cwd)
				}
			}
		})
	}
}

// TestUnkeptNamesAreSaid: entries whose paths no store gives back as they were (longer
// than 4096 bytes, or not text: Python's name for a file name's bytes that are not
// UTF-8) neither fail the run nor the restore; the run says they are not kept, and the
// rest of the tree comes back.
func TestUnkeptNamesAreSaid(t *testing.T) {
	t.Parallel()
	e, _, key := setup(t)
	k := key("unkept")
	r := mustSucceed(t, e, k, `import os
open('kept.txt', 'w').write('kept')
deep = '/'.join(['d' * 100] * 45)
os.makedirs(deep)
open(deep + '/f', 'w').write('too deep')
open(b'\xff\xfename', 'w').write('not text')
os.symlink(b'\xff', 'link-to-no-text')
None`)
	if !strings.Contains(r.Stderr, "not kept with the session state:") || !strings.Contains(r.Stderr, "over 4096 bytes, not valid text") {
		t.Fatalf("stderr %q", r.Stderr)
	}
	evictSaved(t, e, k)
	got := listTree(t, e, k)
	if got.Tree["kept.txt"] == "" || got.Tree["d"+strings.Repeat("d", 99)] != "dir" {
		t.Fatalf("after a restore: %v", got.Tree)
	}
}

// TestReplayFromTheStart: a session replayed from its first cell finds the working
// directory as that cell did, empty (its os.mkdir("out") does not meet the out/ its
// later cells filled), and then the files it saved.
func TestReplayFromTheStart(t *testing.T) {
	t.Parallel()
	e, _ := newEngine(t, func(c *Config) { c.ForceReplay = true })
	k := "replayed"
	mustSucceed(t, e, k, "import os\nos.mkdir('out')\nopen('out/a.txt', 'w').write('a')")
	mustSucceed(t, e, k, "open('out/b.txt', 'w').write('b')\nos.mkdir('empty')")
	evictLive(t, e, k)
	r := mustSucceed(t, e, k, "sorted(os.listdir('out')), os.listdir('empty')")
	if resultOf(r) != "(['a.txt', 'b.txt'], [])" || r.Session.RestoredFrom != FromReplay || strings.Contains(r.Stderr, "could not") {
		t.Fatalf("after a replay: %s from %s, stderr %q", resultOf(r), r.Session.RestoredFrom, r.Stderr)
	}
}
