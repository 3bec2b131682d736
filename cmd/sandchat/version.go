package main

import (
	"fmt"
	"runtime/debug"

	"github.com/sandchat/sandchat/sandbox"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3". Without it
// the module version and VCS revision recorded by the Go toolchain are used.
var version = ""

func versionText() string {
	v, rev, dirty := version, "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "-dirty"
		}
		v += " (" + rev + ")"
	}
	deno, py := sandbox.Pinned()
	return fmt.Sprintf("sandchat %s, deno %s, pyodide %s", v, deno, py)
}
