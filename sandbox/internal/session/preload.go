package session

import (
	"regexp"
	"strings"

	"github.com/sandchat/sandchat"
)

// A request's preload: modules imported before its code (an agent's), checked here and
// imported by the session's driver.

const maxPreload = 64

var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,99}(\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,9}$`)

// PreloadCode is the preload as the import statements it stands for.
func PreloadCode(mods []string) string {
	var b strings.Builder
	for _, m := range mods {
		b.WriteString("import " + m + "\n")
	}
	return b.String()
}

// CheckPreload tells whether mods can be a preload list: at most maxPreload module
// names (dotted identifiers), each imported before a run's code.
func CheckPreload(mods []string) error {
	if len(mods) > maxPreload {
		return sandchat.Errorf(sandchat.EINVALID, "Preload lists %d modules; the limit is %d.", len(mods), maxPreload)
	}
	for _, m := range mods {
		if !moduleName.MatchString(m) {
			return sandchat.Errorf(sandchat.EINVALID, "Preload entry %q is not a module name (a dotted Python identifier such as numpy or dateutil.parser).", m)
		}
	}
	return nil
}
