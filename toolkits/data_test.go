package toolkits

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sandchat/sandchat/toolkits/tables"
)

// TestPythonLoad: the pandas line loads a file the way it was read.
func TestPythonLoad(t *testing.T) {
	t.Parallel()
	utf16 := []byte{0xFF, 0xFE}
	for _, r := range "a\tb\n1\t2\n" {
		utf16 = append(utf16, byte(r), 0)
	}
	for _, tc := range []struct {
		name, file string
		data       []byte
		want       string
	}{
		{"comma, UTF-8, a header", "s.csv", []byte("a,b\n1,2\n"), `pd.read_csv("/data/s.csv")`},
		{"semicolon, Latin-1", "s.csv", []byte("ville;n\ncaf\xe9;1\n"), `pd.read_csv("/data/s.csv", sep=";", encoding="cp1252")`},
		{"tab, UTF-16", "dir/s.tsv", utf16, `pd.read_csv("/data/dir/s.tsv", sep="\t", encoding="utf-16")`},
		{"no header", "n.csv", []byte("1,2\n3,4\n"), `pd.read_csv("/data/n.csv", header=None)`},
		{"JSON Lines", "e.jsonl", []byte(`{"a":1}` + "\n"), `pd.read_json("/data/e.jsonl", lines=True)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, err := tables.Scan(context.Background(), bytes.NewReader(tc.data), int64(len(tc.data)), tables.Request{Name: tc.file, Rows: 1}, tables.DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			py := pythonLoad(tc.file, tb, true)
			if want := "import pandas as pd\ndf = " + tc.want; py.Load != want {
				t.Fatalf("%q, want %q", py.Load, want)
			}
			if sum := Summarize(tc.file, tb, py); !strings.Contains(sum, "In Python it is /data/"+tc.file) {
				t.Fatalf("summary %q", sum)
			}
		})
	}
}

// TestPythonLoadWithoutPandas: where sessions cannot load pandas, the load is Python's
// standard library's, read the way the file was, and the summary says why.
func TestPythonLoadWithoutPandas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file string
		data       []byte
		want       string
	}{
		{"comma, UTF-8, a header", "s.csv", []byte("a,b\n1,2\n"), `with open("/data/s.csv", newline="", encoding="utf-8-sig") as f:` + "\n    rows = list(csv.DictReader(f))"},
		{"semicolon, Latin-1", "s.csv", []byte("ville;n\ncaf\xe9;1\n"), `with open("/data/s.csv", newline="", encoding="cp1252") as f:` + "\n    rows = list(csv.DictReader(f, delimiter=\";\"))"},
		{"no header", "n.csv", []byte("1,2\n3,4\n"), `with open("/data/n.csv", newline="", encoding="utf-8-sig") as f:` + "\n    rows = list(csv.reader(f))"},
		{"JSON Lines", "e.jsonl", []byte(`{"a":1}` + "\n"), `with open("/data/e.jsonl", encoding="utf-8") as f:` + "\n    rows = [json.loads(line) for line in f if line.strip()]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, err := tables.Scan(context.Background(), bytes.NewReader(tc.data), int64(len(tc.data)), tables.Request{Name: tc.file, Rows: 1}, tables.DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			py := pythonLoad(tc.file, tb, false)
			if !strings.HasSuffix(py.Load, tc.want) || strings.Contains(py.Load, "pandas") {
				t.Fatalf("%q, want it to end %q", py.Load, tc.want)
			}
			if sum := Summarize(tc.file, tb, py); !strings.Contains(sum, "pandas cannot be loaded on this server") || strings.Contains(sum, "import pandas") {
				t.Fatalf("summary %q", sum)
			}
		})
	}
}

// TestDataToolSpecs: the tools name the attachments, up to the limit.
func TestDataToolSpecs(t *testing.T) {
	t.Parallel()
	specs := DataToolSpecs([]string{"a.csv", "b.xlsx"})
	if len(specs) != 2 || specs[0].Name != DescribeFileTool || !strings.Contains(string(specs[0].Parameters), `"enum":["a.csv","b.xlsx"]`) ||
		!strings.Contains(specs[1].Description, "Attachments: a.csv, b.xlsx.") {
		t.Fatalf("%+v", specs)
	}
	if none := DataToolSpecs(nil); strings.Contains(string(none[0].Parameters), "enum") || !strings.Contains(none[0].Description, "no attachments yet") {
		t.Fatalf("%+v", none)
	}
	many := make([]string, maxToolOffer+1)
	for i := range many {
		many[i] = strings.Repeat("x", i+1) + ".csv"
	}
	if strings.Contains(string(DataToolSpecs(many)[0].Parameters), "enum") {
		t.Fatal("an enum past the limit")
	}
}
