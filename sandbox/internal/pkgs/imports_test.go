package pkgs

import (
	"strings"
	"testing"
)

// TestImportedModules: the engine reads import statements as Python does.
func TestImportedModules(t *testing.T) {
	t.Parallel()
	code := `import a, b.c as d
from e.f import (g,
    h)
from . import i
from .j import k
x = "import l"
y = '''
import m
'''
# import n
if x: import o
z = 1; import p.q
w = f"{x!r} import r" + rb'import s'
try: from t import u
except ImportError: pass
v = [
import_thing for import_thing in ()]
def f(): import w
`
	got := strings.Join(ImportedModules(code), " ")
	if want := "a b e o p t w"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
