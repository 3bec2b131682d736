package sandchat_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/sandchat/sandchat"

// layers says which of the project's packages each package may import. Imports run
// down: domain packages never import their adapters or the packages that use them, and
// only cmd wires adapters in. A package not listed may import none of the project.
var layers = map[string][]string{
	"":                               nil,
	"sandbox":                        {"", "sandbox/internal/admit", "sandbox/internal/state", "sandbox/internal/pkgs", "sandbox/internal/proc", "sandbox/internal/session"},
	"sandbox/internal/session":       {"", "sandbox/internal/pkgs", "sandbox/internal/proc", "sandbox/internal/state"},
	"sandbox/internal/admit":         nil,
	"sandbox/internal/proc":          {"", "sandbox/internal/pkgs", "sandbox/internal/state"},
	"sandbox/internal/state":         nil,
	"sandbox/internal/pkgs":          nil,
	"sandbox/internal/pkgs/pkgstest": nil,
	"sandbox/redisstore":             {"", "sandbox/internal/state"},
	"sandbox/pgcold":                 {"", "migrations/pgdb"},
	"sandbox/prommetrics":            {"sandbox"},
	"conversations":                  {""},
	"toolkits":                       {"", "conversations", "sandbox", "toolkits/tables"},
	"toolkits/tables":                nil,
	"toolkits/tables/tablestest":     nil,
	"agents":                         {"", "conversations", "toolkits"},
	"frontend-api":                   {"", "conversations", "conversations/lifecycle", "toolkits", "toolkits/tables", "agents", "sandbox"},
	"migrations":                     nil,
	"migrations/testenv":             {"migrations"},
	"conversations/pgstore":          {"", "conversations", "migrations/pgdb"},
	"conversations/redisbus":         {"", "conversations"},
	"conversations/lifecycle":        {"", "conversations", "agents"},
	"agents/pgstore":                 {"", "agents", "migrations/pgdb"},
	"agents/openai":                  {"", "agents"},
	"agents/openai/openaitest":       nil,
	"migrations/pgdb":                {""},
	"sandbox/sandboxtest":            nil,
}

// domains hold the product's types and rules.
var domains = []string{"", "conversations", "agents", "toolkits", "sandbox"}

// drivers are what the domain packages leave to their adapters.
var drivers = []string{"github.com/jackc/pgx", "github.com/redis/go-redis", "github.com/gofiber/fiber"}

// TestLayers reads every package's imports (tests aside) and fails on an import that
// runs back up, on an adapter imported by anything but cmd, and on a driver in a
// domain package.
func TestLayers(t *testing.T) {
	imports := map[string]map[string]bool{} // package dir -> imported paths
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if dir == "." {
			dir = ""
		}
		if imports[dir] == nil {
			imports[dir] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			imports[dir][p] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dirs := make([]string, 0, len(imports))
	for dir := range imports {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		if dir == "cmd/sandchat" {
			continue // main wires everything
		}
		allowed, known := layers[dir]
		if !known {
			t.Errorf("package %q has no place in the layers of layers_test.go: add it", dir)
			continue
		}
		domain := slices.Contains(domains, dir)
		for _, imp := range slices.Sorted(maps.Keys(imports[dir])) {
			if own, ok := strings.CutPrefix(imp, module); ok {
				own = strings.TrimPrefix(own, "/")
				if !slices.Contains(allowed, own) {
					t.Errorf("%s imports %s: not below it (layers_test.go says what it may import: %q)", pkgName(dir), pkgName(own), allowed)
				}
				continue
			}
			for _, d := range drivers {
				if domain && strings.HasPrefix(imp, d) {
					t.Errorf("%s imports the driver %s: drivers belong in adapters", pkgName(dir), imp)
				}
			}
		}
	}
}

func pkgName(dir string) string {
	if dir == "" {
		return "the root package"
	}
	return dir
}
