package proc

import (
	"slices"
	"strings"
	"testing"
)

// TestRunReplyPathsBounded: a run reply whose working-directory paths could be read as
// another kind's key (a file path ending in a slash reads as a directory, one holding a
// NUL as a link: state.TreeOf), or are empty or too long, is refused; an honest one
// passes.
func TestRunReplyPathsBounded(t *testing.T) {
	t.Parallel()
	cwd := func(s string) *string { return &s }
	ok := RunReply{Status: "success", Changed: []ChangedFile{{Path: "a/b.txt"}}, Dirs: []string{"a", "x\ny"},
		Links: []Link{{Path: "l", Target: "../a"}}, Deleted: []string{"old"}, Cwd: cwd("/")}
	if err := ok.Check(1000, 100, Frame{}); err != nil {
		t.Fatalf("an honest reply: %v", err)
	}
	long := strings.Repeat("d/", 2049)
	for name, bad := range map[string]func(r *RunReply){
		"a file path ending in a slash": func(r *RunReply) { r.Changed[0].Path = "a/" },
		"a file path holding a NUL":     func(r *RunReply) { r.Changed[0].Path = "a\x00" },
		"an empty directory path":       func(r *RunReply) { r.Dirs[0] = "" },
		"a directory path too long":     func(r *RunReply) { r.Dirs[0] = long },
		"a link path ending in a slash": func(r *RunReply) { r.Links[0].Path = "l/" },
		"a link without a target":       func(r *RunReply) { r.Links[0].Target = "" },
		"a deleted path holding a NUL":  func(r *RunReply) { r.Deleted[0] = "\x00cwd" },
		"an empty current directory":    func(r *RunReply) { r.Cwd = cwd("") },
		"too many directories":          func(r *RunReply) { r.Dirs = slices.Repeat([]string{"d"}, 101) },
		"a negative count not kept":     func(r *RunReply) { r.Unkept = -1 },
	} {
		r := ok
		r.Changed, r.Dirs, r.Links, r.Deleted = append([]ChangedFile{}, ok.Changed...), append([]string{}, ok.Dirs...), append([]Link{}, ok.Links...), append([]string{}, ok.Deleted...)
		bad(&r)
		if err := r.Check(1000, 100, Frame{}); err == nil {
			t.Errorf("%s: passed", name)
		}
	}
}
