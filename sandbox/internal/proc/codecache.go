package proc

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// DenoDir is where a session process finds Deno's cache (DENO_DIR) inside its sandbox.
const DenoDir = "/tmp/deno"

// CodeCache is the node's cache of what Deno compiles for a session process: the
// runtime's TypeScript transpiled to JavaScript, and V8's code cache of it and of
// Pyodide's JavaScript. Without it every process would transpile and compile them
// again (its DENO_DIR, in a private /tmp, starts empty). Processes that run no
// session's code fill it (Fill); every process after them mounts it read-only, so no
// session can change what another runs. Only under bubblewrap: a process-mode session
// has no mount of its own to make read-only, and keeps a fresh DENO_DIR.
type CodeCache struct {
	dir atomic.Pointer[string] // nil until filled
}

// CodeMount is the compiled-code cache a process mounts: none when Dir is "", writable
// only for a process that fills it.
type CodeMount struct {
	Dir  string
	Fill bool
}

// Mount is the cache as every session process mounts it, once it is filled.
func (c *CodeCache) Mount() CodeMount { return CodeMount{Dir: c.Dir()} }

// Filling is the mount of a process that fills the cache at dir.
func (c *CodeCache) Filling(dir string) CodeMount { return CodeMount{Dir: dir, Fill: true} }

// Filled makes dir the cache every process started from now on mounts.
func (c *CodeCache) Filled(dir string) { c.dir.Store(&dir) }

// Ready tells whether the cache is filled.
func (c *CodeCache) Ready() bool { return c.dir.Load() != nil }

// Dir is the cache's directory on the host, "" until it is filled.
func (c *CodeCache) Dir() string {
	if d := c.dir.Load(); d != nil {
		return *d
	}
	return ""
}

// CodeKey names what a compiled-code cache filled by this jail's processes holds: the
// Deno binary and its flags, every source of the runtime (RuntimeSources) and Pyodide's
// JavaScript. A cache under
// another key may hold code compiled from other sources or by another V8.
func (j *Jail) CodeKey() string {
	h := sha256.New()
	fmt.Fprintln(h, strings.Join(j.denoArgs(""), "\x00"))
	if st, err := os.Stat(j.cfg.DenoPath); err == nil {
		fmt.Fprintln(h, st.Size(), st.ModTime().UnixNano())
	}
	files := RuntimeSources(j.cfg.RuntimeDir)
	files = append(files, filepath.Join(j.cfg.PyodideDir, "pyodide.mjs"), filepath.Join(j.cfg.PyodideDir, "pyodide.asm.mjs"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		fmt.Fprintln(h, f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:20]
}
