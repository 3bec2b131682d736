package state

import (
	"reflect"
	"slices"
	"testing"
)

// TestTreeKeys: every kind of entry, under any path a working directory may hold (a
// name with a slash-free newline, one that looks like a key's suffix but is not), reads
// back as what it was, and an entry's keys are one per kind.
func TestTreeKeys(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{
		"a.txt": []byte("a"), "dir/empty.txt": {}, "x\ny": []byte("nl"), "cwd": []byte("not the cwd"),
		DirKey("dir"): {}, DirKey("dir/sub"): {}, DirKey("x\ny d"): {},
		LinkKey("link"): []byte("../target"), LinkKey("dir/dangling"): []byte("/nowhere"),
		CwdKey: []byte("/home/pyodide/dir"),
	}
	got := TreeOf(files)
	slices.Sort(got.Dirs)
	want := Tree{
		Files: map[string][]byte{"a.txt": []byte("a"), "dir/empty.txt": {}, "x\ny": []byte("nl"), "cwd": []byte("not the cwd")},
		Dirs:  []string{"dir", "dir/sub", "x\ny d"},
		Links: map[string]string{"link": "../target", "dir/dangling": "/nowhere"},
		Cwd:   "/home/pyodide/dir",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("TreeOf:\n got %+v\nwant %+v", got, want)
	}
	keys := PathKeys("p")
	if keys != [3]string{"p", DirKey("p"), LinkKey("p")} || keys[0] == keys[1] || keys[1] == keys[2] || keys[0] == CwdKey {
		t.Fatalf("PathKeys(p) = %q", keys)
	}
	if empty := TreeOf(nil); len(empty.Files) != 0 || empty.Dirs != nil || len(empty.Links) != 0 || empty.Cwd != "" {
		t.Fatalf("TreeOf(nil) = %+v", empty)
	}
}
