package frontendapi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
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

var importRE = regexp.MustCompile(`(?m)^import [^;]*? from "/js/([a-z]+)\.js";`)

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
		for _, m := range importRE.FindAllStringSubmatch(src, -1) {
			if !slices.Contains(bottom, m[1]) {
				t.Errorf("%s.js imports the view %s.js", name, m[1])
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
	for _, name := range []string{"messages", "socket"} {
		for _, m := range handledRE.FindAllStringSubmatch(mods[name], -1) {
			handled[m[1]] = true
		}
	}
	if len(handled) < 10 {
		t.Fatalf("found only %d handled events in messages.js and socket.js: %v", len(handled), handled)
	}
	for name := range handled {
		if !sent[name] {
			t.Errorf("the web client handles %q, which the server never sends", name)
		}
	}
	// Sent, and not for the web client to handle.
	unhandled := map[string]string{
		"access.revoked": "the server ends the removed member's subscription itself",
		"session.ended":  "the server closes the sockets of a signed-out session itself",
		"pong":           "the answer to a client's ping, which the web client does not send",
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
