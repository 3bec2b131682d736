package proc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestProtocolMatchesRuntime: the engine (Go) and the session process (TypeScript) speak
// one protocol. Every request the engine defines (a struct with an Op field whose comment
// names the op) must be in runtime/protocol.ts's Request type with the same fields, and
// handled by host.ts; and the other way round.
func TestProtocolMatchesRuntime(t *testing.T) {
	goOps := goRequests(t, "protocol.go")
	tsOps := tsRequests(t, filepath.Join("..", "..", "runtime", "protocol.ts"))
	handled := hostCases(t, filepath.Join("..", "..", "runtime", "host.ts"))
	for op, fields := range goOps {
		ts, ok := tsOps[op]
		switch {
		case !ok:
			t.Errorf("op %q is sent by the engine but missing from protocol.ts's Request type", op)
		case !slices.Equal(fields, ts):
			t.Errorf("op %q: the engine sends %v, protocol.ts declares %v", op, fields, ts)
		}
		if !handled[op] {
			t.Errorf("op %q is sent by the engine but host.ts does not handle it", op)
		}
	}
	for op := range tsOps {
		if _, ok := goOps[op]; !ok {
			t.Errorf("op %q is in protocol.ts but the engine has no request for it", op)
		}
	}
	for op := range handled {
		if _, ok := goOps[op]; !ok {
			t.Errorf("host.ts handles op %q that the engine never sends", op)
		}
	}
}

// TestRuntimeTypeChecks: the control thread and the Worker share one typed union of
// their messages (runtime/messages.ts); the compiler holds both sides to it, and each
// side to the other's ops (the Worker's switch on ToWorker is exhaustive).
func TestRuntimeTypeChecks(t *testing.T) {
	runtime, err := filepath.Abs(filepath.Join("..", "..", "runtime"))
	if err != nil {
		t.Fatal(err)
	}
	deno := filepath.Join(runtime, "node_modules", "deno", "deno")
	if _, err := os.Stat(deno); err != nil {
		t.Fatalf("no Deno in the runtime (%v): install it with npm ci --prefix sandbox/runtime, or .ci/services", err)
	}
	// Each entry on its own: the control thread is checked against Deno's main-thread
	// types, the Worker (worker/main.ts names its lib) against a worker's.
	for _, entry := range []string{"host.ts", WorkerEntry} {
		cmd := exec.Command(deno, "check", "--no-config", "--no-lock", "--quiet", entry)
		cmd.Dir = runtime
		cmd.Env = append(os.Environ(), "NO_COLOR=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("deno check %s: %v\n%s", entry, err, out)
		}
	}
}

// goRequests maps each op to the JSON names of its fields (sorted, without id and op).
func goRequests(t *testing.T, files ...string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			st, ok := n.(*ast.StructType)
			if !ok {
				return true
			}
			op, fields := "", []string{}
			for _, fl := range st.Fields.List {
				tag := ""
				if fl.Tag != nil {
					tag = reflect.StructTag(strings.Trim(fl.Tag.Value, "`")).Get("json")
				}
				js := strings.Split(tag, ",")[0]
				if len(fl.Names) == 1 && fl.Names[0].Name == "Op" && fl.Comment != nil {
					op = strings.TrimSpace(strings.TrimPrefix(fl.Comment.Text(), "//"))
					continue
				}
				if js != "" && js != "-" && js != "id" {
					fields = append(fields, js)
				}
			}
			if op != "" && !strings.Contains(op, " ") {
				slices.Sort(fields)
				out[op] = fields
			}
			return true
		})
	}
	if len(out) < 5 {
		t.Fatalf("found only %v in the engine's requests", out)
	}
	return out
}

var (
	tsRequestType = regexp.MustCompile(`(?s)export type Request =(.*?);\n\n`)
	tsMember      = regexp.MustCompile(`\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}`)
	tsField       = regexp.MustCompile(`(\w+)\??\s*:`)
	tsOp          = regexp.MustCompile(`op:\s*"(\w+)"`)
)

// tsRequests reads protocol.ts's Request union the same way.
func tsRequests(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := tsRequestType.FindSubmatch(b)
	if m == nil {
		t.Fatal("no Request type in protocol.ts")
	}
	out := map[string][]string{}
	for _, member := range tsMember.FindAllStringSubmatch(string(m[1]), -1) {
		body := member[1]
		op := tsOp.FindStringSubmatch(body)
		if op == nil {
			continue
		}
		// Fields of the member itself, not of object types nested in it.
		flat := regexp.MustCompile(`\{[^{}]*\}`).ReplaceAllString(body, "")
		fields := []string{}
		for _, f := range tsField.FindAllStringSubmatch(flat, -1) {
			if f[1] != "id" && f[1] != "op" {
				fields = append(fields, f[1])
			}
		}
		slices.Sort(fields)
		out[op[1]] = fields
	}
	return out
}

// hostCases lists the ops host.ts's request handler switches on.
func hostCases(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "async function handle(")
	if i < 0 {
		t.Fatal("no handle() in host.ts")
	}
	out := map[string]bool{}
	for _, c := range regexp.MustCompile(`case "(\w+)":`).FindAllStringSubmatch(s[i:], -1) {
		out[c[1]] = true
	}
	return out
}
