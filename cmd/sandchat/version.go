package main

import (
	"fmt"
	"runtime/debug"

	"github.com/sandchat/sandchat/sandbox"
)

// version is set at build time: the Makefile and the Dockerfile pass
// -ldflags "-X main.version=$(git describe --tags --match 'v[0-9]*' --always --dirty)". Without it the
// module version and VCS revision recorded by the Go toolchain are used.
var version = ""

// buildVersion is this build's version: the one set at build time, else what the
// toolchain recorded, else devel.
func buildVersion() string {
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
	if version != "" {
		return version // git describe names the revision already
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
	return v
}

func versionText() string {
	deno, py := sandbox.Pinned()
	return fmt.Sprintf("sandchat %s, deno %s, pyodide %s", buildVersion(), deno, py)
}
