package state

import "strings"

// A session's working directory is kept in one map (State.Files, Save.Changed and
// Save.Deleted), by key: a regular file under its path (the value its bytes), a
// directory under its path and a slash (no value), a symbolic link under its path and a
// NUL byte (the value its target), and the interpreter's current directory under
// CwdKey. No path ends with a slash or holds a NUL, so no key can be read two ways; a
// state saved before directories and links were kept holds files alone.

// CwdKey keeps the interpreter's current directory, an absolute path.
const CwdKey = "\x00cwd"

// DirKey is the key of the directory at path.
func DirKey(path string) string { return path + "/" }

// LinkKey is the key of the symbolic link at path.
func LinkKey(path string) string { return path + "\x00" }

// PathKeys are the keys an entry at path may be kept under, one per kind: what a run
// put at path replaces all of them.
func PathKeys(path string) [3]string { return [3]string{path, DirKey(path), LinkKey(path)} }

// Tree is a session's working directory as kept, by kind.
type Tree struct {
	Files map[string][]byte // path → contents
	Dirs  []string
	Links map[string]string // path → target
	Cwd   string            // "" for the working directory itself
}

// TreeOf reads the working directory kept in files.
func TreeOf(files map[string][]byte) Tree {
	t := Tree{Files: map[string][]byte{}, Links: map[string]string{}}
	for k, v := range files {
		switch {
		case k == CwdKey:
			t.Cwd = string(v)
		case strings.HasSuffix(k, "/"):
			t.Dirs = append(t.Dirs, strings.TrimSuffix(k, "/"))
		case strings.HasSuffix(k, "\x00"):
			t.Links[strings.TrimSuffix(k, "\x00")] = string(v)
		default:
			t.Files[k] = v
		}
	}
	return t
}
