package frontendapi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/toolkits"
)

// webModules reads the web client's modules: name ("state", "app") → source.
func webModules(t *testing.T) map[string]string {
	t.Helper()
	mods := map[string]string{}
	err := fs.WalkDir(web, "web", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(p, "web/vendor/") || filepath.Ext(p) != ".js" {
			return err
		}
		b, err := web.ReadFile(p)
		mods[strings.TrimSuffix(filepath.Base(p), ".js")] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

// importRE finds a module's imports of the client's own modules: static (import … from,
// export … from, a bare import) and dynamic (import("/js/x.js")).
var importRE = regexp.MustCompile(`(?m)(?:^(?:import|export)\b[^;]*?\bfrom\s*|^import\s*|\bimport\(\s*)"/js/([a-z]+)\.js"`)

// imports lists the client's modules that src imports, each once, in order.
func imports(src string) []string {
	var out []string
	for _, m := range importRE.FindAllStringSubmatch(src, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// TestWebModulesBottom: the modules at the bottom of the web client (state, api, dom)
// import no view, so a view can use them without a cycle through itself (STYLE 18);
// they report upward by events.
func TestWebModulesBottom(t *testing.T) {
	mods := webModules(t)
	bottom := []string{"state", "api", "dom"}
	for _, name := range bottom {
		src, ok := mods[name]
		if !ok {
			t.Fatalf("no module %s.js", name)
		}
		for _, imp := range imports(src) {
			if !slices.Contains(bottom, imp) {
				t.Errorf("%s.js imports the view %s.js", name, imp)
			}
		}
	}
}

// TestWebModulesNoCycle: the web client's imports run one way. A module that needs to
// tell one above it something reports by an event or a callback, which app.js (the
// entry, which nothing imports) wires: no chain of imports comes back to where it
// started, so every module can be read, and loaded, before the ones that use it.
func TestWebModulesNoCycle(t *testing.T) {
	mods := webModules(t)
	graph := map[string][]string{}
	for name, src := range mods {
		for _, imp := range imports(src) {
			if _, ok := mods[imp]; !ok {
				t.Errorf("%s.js imports /js/%s.js, which does not exist", name, imp)
				continue
			}
			graph[name] = append(graph[name], imp)
		}
	}
	if len(graph["app"]) < 10 {
		t.Fatalf("found only %d imports in app.js: %v", len(graph["app"]), graph["app"])
	}
	for _, cycle := range importCycles(graph) {
		t.Errorf("import cycle: %s", strings.Join(cycle, " → "))
	}
	for name := range mods {
		if name != "app" && slices.Contains(graph[name], "app") {
			t.Errorf("%s.js imports app.js, the entry", name)
		}
	}
}

// importCycles returns one cycle through each import that closes one (a depth-first
// walk's back edges), each as the modules along it, the first repeated at the end.
func importCycles(graph map[string][]string) [][]string {
	const (
		unseen = iota
		onPath
		done
	)
	mark := map[string]int{}
	var path []string
	var cycles [][]string
	var walk func(string)
	walk = func(n string) {
		mark[n] = onPath
		path = append(path, n)
		for _, m := range graph[n] {
			switch mark[m] {
			case unseen:
				walk(m)
			case onPath:
				i := slices.Index(path, m)
				cycles = append(cycles, append(slices.Clone(path[i:]), m))
			}
		}
		path = path[:len(path)-1]
		mark[n] = done
	}
	names := slices.Sorted(maps.Keys(graph))
	for _, n := range names {
		if mark[n] == unseen {
			walk(n)
		}
	}
	return cycles
}

// TestWebModulesImportsResolve: every name a module imports from another of the client's
// modules is one that module exports. With no build step, a wrong name is otherwise
// found only by a browser, which then runs none of the page.
func TestWebModulesImportsResolve(t *testing.T) {
	mods := webModules(t)
	namedRE := regexp.MustCompile(`(?m)^import \{([^}]*)\} from "/js/([a-z]+)\.js";`)
	for name, src := range mods {
		for _, m := range namedRE.FindAllStringSubmatch(src, -1) {
			target, ok := mods[m[2]]
			if !ok {
				continue // TestWebModulesNoCycle names it
			}
			for _, imported := range strings.Split(m[1], ",") {
				imported = strings.TrimSpace(strings.Split(strings.TrimSpace(imported), " as ")[0])
				if imported == "" {
					continue
				}
				exportRE := regexp.MustCompile(`(?m)^export (?:async )?(?:function\*? |const |let |class )` + regexp.QuoteMeta(imported) + `(?:[^\w$]|$)`)
				if !exportRE.MatchString(target) {
					t.Errorf("%s.js imports %s from %s.js, which does not export it", name, imported, m[2])
				}
			}
		}
	}
}

// TestWebEventNames: every event the web client handles is one the server sends: the
// names exist once, in Go (the Event constants of the conversations and frontend-api
// packages, and the WebSocket's own frames), and the JS is held against them. Every
// event the server sends is handled by the client, or listed here with why not.
func TestWebEventNames(t *testing.T) {
	sent := goEventNames(t)
	mods := webModules(t)
	handledRE := regexp.MustCompile(`(?:case |ev\.type === )"([a-z_]+(?:\.[a-z_]+)?)"`)
	handled := map[string]bool{}
	for _, name := range []string{"messages", "live"} {
		for _, m := range handledRE.FindAllStringSubmatch(mods[name], -1) {
			handled[m[1]] = true
		}
	}
	if len(handled) < 10 {
		t.Fatalf("found only %d handled events in messages.js and live.js: %v", len(handled), handled)
	}
	for name := range handled {
		if !sent[name] {
			t.Errorf("the web client handles %q, which the server never sends", name)
		}
	}
	// Sent, and not for the web client to handle.
	unhandled := map[string]string{
		"access.revoked":      "the server ends the removed member's subscription itself",
		"session.ended":       "the server closes the sockets of a signed-out session itself",
		"credentials.revoked": "the server closes the sockets of a revoked token or session, or a disabled account, itself",
		"pong":                "the answer to a client's ping, which the web client does not send",
	}
	var missing []string
	for name := range sent {
		if !handled[name] && unhandled[name] == "" {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the server sends %q, which the web client does not handle", missing)
	}
}

// goEventNames reads the names of the events the server sends from its source: the
// string constants named Event… of conversations and frontend-api, and the frame types
// the WebSocket writes itself (cl.frame("error", …), Event{Type: "subscribed"}).
func goEventNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range []string{"../conversations", "."} {
		pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, pkg := range pkgs {
			for _, f := range pkg.Files {
				ast.Inspect(f, func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.ValueSpec:
						for i, id := range n.Names {
							if strings.HasPrefix(id.Name, "Event") && i < len(n.Values) {
								if s, ok := stringLit(n.Values[i]); ok {
									names[s] = true
								}
							}
						}
					case *ast.CallExpr:
						if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "frame" && len(n.Args) > 0 {
							if s, ok := stringLit(n.Args[0]); ok {
								names[s] = true
							}
						}
					case *ast.KeyValueExpr:
						if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Type" {
							if s, ok := stringLit(n.Value); ok {
								names[s] = true
							}
						}
					}
					return true
				})
			}
		}
	}
	return names
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// TestWebRunErrorTypes: the run error types the web client tells apart are the ones
// the server records (toolkits), so a rename on one side fails here, not in a browser.
func TestWebRunErrorTypes(t *testing.T) {
	mods := webModules(t)
	if want := strconv.Quote(toolkits.ErrServerRestart); !strings.Contains(mods["cells"], "const SERVER_RESTART = "+want+";") {
		t.Errorf("cells.js does not name the error type of a run the server's restart stopped, %s", want)
	}
}
