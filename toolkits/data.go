package toolkits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/toolkits/tables"
)

// The tools the data analysis tool offers a model.
const (
	DescribeFileTool = "describe_file"
	PreviewRowsTool  = "preview_rows"
)

// DataFiles is what the data analysis tool reads of a conversation's files; both check
// the caller's view access (404 for a stranger). A file is read through OpenFile as it
// is described, never held whole.
type DataFiles interface {
	Files(ctx context.Context, convID int64) ([]conversations.StoredFile, error)
	OpenFile(ctx context.Context, id int64) (conversations.StoredFile, conversations.FileReader, error)
}

// Tables reads the tables attached to conversations (toolkits/tables). The model's
// describe_file and preview_rows and the REST preview go through it.
type Tables struct {
	Files DataFiles
	// Limits bound each read; zero is tables.DefaultLimits.
	Limits tables.Limits
}

// Rows a preview gives when not asked, and describe_file's first rows.
const (
	PreviewRows  = 20
	describeRows = 5
	// maxToolOffer is how many attachments a tool spec lists by name.
	maxToolOffer = 64
	// modelTableBytes bounds the table in a tool result: past it, rows and columns are
	// cut, with a note.
	modelTableBytes = 24 << 10
)

func (d *Tables) limits() tables.Limits {
	if d.Limits.MaxColumns == 0 {
		return tables.DefaultLimits
	}
	return d.Limits
}

// Preview reads rows offset..offset+rows of one sheet (the first when sheet is "") of a
// file of the conversation, with its columns' profile; view access.
func (d *Tables) Preview(ctx context.Context, convID, fileID int64, sheet string, offset int64, rows int) (*tables.Table, error) {
	f, r, err := d.Files.OpenFile(ctx, fileID)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if f.ConversationID != convID {
		return nil, sandchat.Errorf(sandchat.ENOTFOUND, "File not found.")
	}
	if rows <= 0 {
		rows = PreviewRows
	}
	return d.scan(ctx, f, r, tables.Request{Sheet: sheet, Offset: offset, Rows: rows})
}

// scan describes file f, read from r as it goes.
func (d *Tables) scan(ctx context.Context, f conversations.StoredFile, r io.ReaderAt, req tables.Request) (*tables.Table, error) {
	req.Name = f.Name
	t, err := tables.Scan(ctx, r, f.Size, req, d.limits())
	var te *tables.Error
	if errors.As(err, &te) {
		code := sandchat.EINVALID
		if te.Kind == tables.TooLarge {
			code = sandchat.ETOOLARGE
		}
		return nil, &sandchat.Error{Code: code, Message: te.Message}
	}
	return t, err
}

// uploads are the conversation's files under /data, by path.
func (d *Tables) uploads(ctx context.Context, convID int64) ([]conversations.StoredFile, error) {
	files, err := d.Files.Files(ctx, convID)
	if err != nil {
		return nil, err
	}
	var out []conversations.StoredFile
	for _, f := range files {
		if f.Source == "upload" {
			out = append(out, f)
		}
	}
	return out, nil
}

// find is the conversation's file a model names: its path under /data (with or
// without /data/), or its id.
func (d *Tables) find(ctx context.Context, convID int64, ref string) (conversations.StoredFile, error) {
	files, err := d.Files.Files(ctx, convID)
	if err != nil {
		return conversations.StoredFile{}, err
	}
	ref = strings.TrimPrefix(strings.TrimSpace(ref), "/data/")
	id, _ := strconv.ParseInt(ref, 10, 64)
	var names []string
	for _, f := range files {
		if f.Source == "upload" && f.Name == ref || f.ID == id {
			return f, nil
		}
		if f.Source == "upload" {
			names = append(names, f.Name)
		}
	}
	if len(names) == 0 {
		return conversations.StoredFile{}, sandchat.Errorf(sandchat.ENOTFOUND, "This conversation has no attachments.")
	}
	return conversations.StoredFile{}, sandchat.Errorf(sandchat.ENOTFOUND, "No attachment %q; the conversation's attachments are: %s.", ref, strings.Join(names[:min(len(names), maxToolOffer)], ", "))
}

// DataResult is what describe_file and preview_rows give the model: the table as JSON
// and a short summary in words.
type DataResult struct {
	Status  string        `json:"status"` // ok, or error when the file is not a table it can read
	File    string        `json:"file"`
	FileID  int64         `json:"file_id"`
	Summary string        `json:"summary"`
	Table   *tables.Table `json:"table,omitempty"`
	Python  *PythonLoad   `json:"python,omitempty"`
}

// PythonLoad says, when the Python sandbox is on too, where an attachment is and how to
// load it.
type PythonLoad struct {
	Path string `json:"path"`
	Load string `json:"load"`
	Note string `json:"note,omitempty"`
	// SheetCopies are a small workbook's sheets as CSV files under /data (sheetcopies.go).
	SheetCopies []string `json:"sheet_copies,omitempty"`
}

// DataToolSpecs are the data analysis tools as offered to a model; files are the
// conversation's attachments, named in the specs so a model knows what it may ask for.
func DataToolSpecs(files []string) []ToolSpec {
	file := map[string]any{"type": "string", "description": "the attachment: its path under /data as uploaded (e.g. reports/q1.csv), or its file id"}
	if len(files) > 0 && len(files) <= maxToolOffer {
		file["enum"] = files
	}
	listed := "The conversation has no attachments yet."
	if len(files) > 0 {
		listed = "Attachments: " + strings.Join(files[:min(len(files), maxToolOffer)], ", ") + "."
	}
	describe, _ := json.Marshal(map[string]any{
		"type": "object", "additionalProperties": false, "required": []string{"file"},
		"properties": map[string]any{"file": file},
	})
	preview, _ := json.Marshal(map[string]any{
		"type": "object", "additionalProperties": false, "required": []string{"file"},
		"properties": map[string]any{
			"file":   file,
			"sheet":  map[string]any{"type": "string", "description": "an Excel sheet's name; the first sheet when omitted"},
			"offset": map[string]any{"type": "integer", "minimum": 0, "description": "the first data row to return, from 0 (the header is not a data row)"},
			"rows":   map[string]any{"type": "integer", "minimum": 1, "maximum": tables.DefaultLimits.MaxRows, "description": "how many rows (default 20)"},
		},
	})
	return []ToolSpec{
		{Name: DescribeFileTool, Parameters: describe,
			Description: "Describe a table attached to the conversation (CSV, TSV, JSON Lines, Excel .xlsx) without running code: format, encoding, delimiter, sheets, row and column counts, and per column its type (integer, float, bool, date, datetime, text), nulls, distinct values, range, mean and std, most frequent values; plus its first rows. Formulas are read as their saved values, never run. " + listed},
		{Name: PreviewRowsTool, Parameters: preview,
			Description: fmt.Sprintf("Rows offset..offset+rows (at most %d) of a table attached to the conversation, one sheet at a time. %s", tables.DefaultLimits.MaxRows, listed)},
	}
}

// call runs describe_file or preview_rows for the model; python tells whether the
// Python sandbox is on too, so the result says how to load the file there, and pandas
// whether this deployment's sessions can load pandas (else the standard library does).
func (d *Tables) call(ctx context.Context, convID int64, call ToolCall, python, pandas bool) string {
	var args struct {
		File   string `json:"file"`
		Sheet  string `json:"sheet"`
		Offset int64  `json:"offset"`
		Rows   int    `json:"rows"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil || strings.TrimSpace(args.File) == "" {
		return Refuse(`Arguments must be {"file": "<path under /data or file id>"` + map[bool]string{true: `, "sheet"?, "offset"?, "rows"?}.`, false: `}.`}[call.Name == PreviewRowsTool])
	}
	f, err := d.find(ctx, convID, args.File)
	if err != nil {
		return Refuse(sandchat.ErrorMessage(err))
	}
	f, r, err := d.Files.OpenFile(ctx, f.ID)
	if err != nil {
		return Refuse("The file could not be read: " + sandchat.ErrorMessage(err))
	}
	defer r.Close()
	req := tables.Request{AllSheets: true, Rows: describeRows}
	if call.Name == PreviewRowsTool {
		if args.Offset < 0 || args.Rows < 0 {
			return Refuse("offset and rows must not be negative.")
		}
		req = tables.Request{Sheet: args.Sheet, Offset: args.Offset, Rows: args.Rows}
		if req.Rows == 0 {
			req.Rows = PreviewRows
		}
	}
	res := DataResult{Status: "ok", File: f.Name, FileID: f.ID}
	t, err := d.scan(ctx, f, r, req)
	if err != nil {
		res.Status, res.Summary = "error", sandchat.ErrorMessage(err)
		return marshalResult(res)
	}
	if python && f.Source == "upload" {
		res.Python = pythonLoad(f.Name, t, pandas)
	}
	res.Table = fitForModel(t)
	res.Summary = Summarize(f.Name, t, res.Python)
	return marshalResult(res)
}

func marshalResult(r DataResult) string {
	raw, err := json.Marshal(r)
	if err != nil {
		return Refuse("The result could not be encoded: " + err.Error())
	}
	return string(raw)
}

// fitForModel cuts a table's rows and columns until its JSON is at most
// modelTableBytes, noting what was cut.
func fitForModel(t *tables.Table) *tables.Table {
	size := func() int { raw, _ := json.Marshal(t); return len(raw) }
	for i := range t.Sheets {
		sh := &t.Sheets[i]
		for size() > modelTableBytes && len(sh.Data) > 1 {
			sh.Data = sh.Data[:len(sh.Data)/2]
			sh.Notes = append(sh.Notes, fmt.Sprintf("Only %d rows are shown here; ask preview_rows for more.", len(sh.Data)))
		}
	}
	for i := range t.Sheets {
		sh := &t.Sheets[i]
		for size() > modelTableBytes && len(sh.Columns) > 8 {
			keep := len(sh.Columns) / 2
			sh.Columns = sh.Columns[:keep]
			for r := range sh.Data {
				sh.Data[r] = sh.Data[r][:min(len(sh.Data[r]), keep)]
			}
			sh.Notes = append(sh.Notes, fmt.Sprintf("Only the first %d columns are shown here.", keep))
		}
	}
	return t
}

// pythonLoad is the code that loads an upload as it was read: with pandas where the
// deployment's sessions can load it, else with the standard library's csv and json.
func pythonLoad(name string, t *tables.Table, pandas bool) *PythonLoad {
	if !pandas {
		return stdlibLoad(name, t)
	}
	p := "/data/" + name
	q := strconv.Quote(p)
	switch t.Format {
	case tables.XLSX:
		sheet := ""
		if len(t.SheetNames) > 0 {
			sheet = ", sheet_name=" + strconv.Quote(t.SheetNames[0])
		}
		load := &PythonLoad{Path: p, Load: "import pandas as pd\ndf = pd.read_excel(" + q + sheet + ")",
			Note: "pandas reads .xlsx with openpyxl, which is not part of Pyodide: install it first (import micropip; await micropip.install(\"openpyxl\")) where packages can be fetched."}
		for _, sh := range t.SheetNames {
			if c := SheetCopyPath(name, t.Size, sh); c != "" {
				load.SheetCopies = append(load.SheetCopies, "/data/"+c)
			}
		}
		if len(load.SheetCopies) > 0 {
			load.Load = "import pandas as pd\ndf = pd.read_csv(" + strconv.Quote(load.SheetCopies[0]) + ")"
			load.Note = "Each sheet is also a CSV file beside the workbook, made by the server (values as read here: dates ISO, formulas their saved values): " +
				strings.Join(load.SheetCopies, ", ") + ". pd.read_excel needs openpyxl, which is not part of Pyodide."
		}
		return load
	case tables.JSONL:
		return &PythonLoad{Path: p, Load: "import pandas as pd\ndf = pd.read_json(" + q + ", lines=True)"}
	}
	var opts []string
	switch t.Delimiter {
	case ",", "":
	case "\t":
		opts = append(opts, `sep="\t"`)
	default:
		opts = append(opts, "sep="+strconv.Quote(t.Delimiter))
	}
	switch t.Encoding {
	case "utf-16le", "utf-16be":
		opts = append(opts, `encoding="utf-16"`)
	case "latin-1":
		opts = append(opts, `encoding="cp1252"`)
	}
	if len(t.Sheets) > 0 && !t.Sheets[0].Header {
		opts = append(opts, "header=None")
	}
	args := q
	if len(opts) > 0 {
		args += ", " + strings.Join(opts, ", ")
	}
	return &PythonLoad{Path: p, Load: "import pandas as pd\ndf = pd.read_csv(" + args + ")"}
}

// noPandas says why a load does without pandas.
const noPandas = "pandas cannot be loaded on this server (its packages are not available to the sandbox here), so this reads the file with Python's standard library."

// stdlibLoad is the code that loads an upload as it was read with Python's standard
// library: rows as dicts by header (lists without one), every value a string.
func stdlibLoad(name string, t *tables.Table) *PythonLoad {
	p := "/data/" + name
	switch t.Format {
	case tables.XLSX:
		load := &PythonLoad{Path: p}
		for _, sh := range t.SheetNames {
			if c := SheetCopyPath(name, t.Size, sh); c != "" {
				load.SheetCopies = append(load.SheetCopies, "/data/"+c)
			}
		}
		if len(load.SheetCopies) == 0 {
			load.Note = "pandas cannot be loaded on this server and Python's standard library does not read .xlsx: use preview_rows to read its rows."
			return load
		}
		load.Load = csvRows(load.SheetCopies[0], ",", "utf-8", len(t.Sheets) == 0 || t.Sheets[0].Header)
		load.Note = noPandas + " Each sheet is a CSV file beside the workbook, made by the server (values as read here: dates ISO, formulas their saved values): " +
			strings.Join(load.SheetCopies, ", ") + "."
		return load
	case tables.JSONL:
		return &PythonLoad{Path: p, Note: noPandas,
			Load: "import json\nwith open(" + strconv.Quote(p) + ", encoding=\"utf-8\") as f:\n    rows = [json.loads(line) for line in f if line.strip()]"}
	}
	encoding := map[string]string{"utf-16le": "utf-16", "utf-16be": "utf-16", "latin-1": "cp1252"}[t.Encoding]
	if encoding == "" {
		encoding = "utf-8-sig" // a byte-order mark, if any, is not part of the first name
	}
	return &PythonLoad{Path: p, Note: noPandas, Load: csvRows(p, t.Delimiter, encoding, len(t.Sheets) == 0 || t.Sheets[0].Header)}
}

// csvRows is the csv module's reading of a delimited file.
func csvRows(path, delimiter, encoding string, header bool) string {
	opts := ""
	if delimiter != "," && delimiter != "" {
		opts = ", delimiter=" + strconv.Quote(delimiter)
	}
	reader := "csv.DictReader(f" + opts + ")"
	if !header {
		reader = "csv.reader(f" + opts + ")"
	}
	return "import csv\nwith open(" + strconv.Quote(path) + ", newline=\"\", encoding=" + strconv.Quote(encoding) + ") as f:\n    rows = list(" + reader + ")"
}

// summaryColumns is how many columns a summary names.
const summaryColumns = 20

// Summarize says in a few lines what a table holds.
func Summarize(name string, t *tables.Table, py *PythonLoad) string {
	var b strings.Builder
	format := strings.ToUpper(t.Format)
	if t.Format == tables.XLSX {
		format = "Excel workbook"
	}
	fmt.Fprintf(&b, "%s: %s, %s", path.Base(name), format, sandchat.Size(t.Size))
	if t.Encoding != "" {
		fmt.Fprintf(&b, ", %s", t.Encoding)
	}
	if t.Delimiter != "" {
		d := strconv.Quote(t.Delimiter)
		if t.Delimiter == "\t" {
			d = "tab"
		}
		fmt.Fprintf(&b, ", delimiter %s", d)
	}
	if len(t.SheetNames) > 0 {
		fmt.Fprintf(&b, ", sheets: %s", strings.Join(t.SheetNames, ", "))
	}
	b.WriteString(".\n")
	for _, sh := range t.Sheets {
		if sh.Name != "" {
			fmt.Fprintf(&b, "Sheet %q: ", sh.Name)
		}
		header := "no header row"
		if sh.Header {
			header = "with a header row"
		}
		fmt.Fprintf(&b, "%d rows × %d columns, %s.\n", sh.Rows, sh.ColumnCount, header)
		for i, c := range sh.Columns {
			if i == summaryColumns {
				fmt.Fprintf(&b, "- … and %d more columns\n", len(sh.Columns)-i)
				break
			}
			b.WriteString("- " + describeColumn(c) + "\n")
		}
		for _, n := range sh.Notes {
			b.WriteString(n + "\n")
		}
	}
	for _, n := range t.Notes {
		b.WriteString(n + "\n")
	}
	if py != nil && py.Load == "" {
		fmt.Fprintf(&b, "In Python it is %s.\n", py.Path)
	} else if py != nil {
		fmt.Fprintf(&b, "In Python it is %s:\n%s\n", py.Path, py.Load)
		if py.Note != "" {
			b.WriteString(py.Note + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func describeColumn(c tables.Column) string {
	parts := []string{}
	if c.Nulls > 0 {
		parts = append(parts, fmt.Sprintf("%d null", c.Nulls))
	}
	switch c.Type {
	case tables.TypeInteger, tables.TypeFloat:
		s := fmt.Sprintf("%v to %v", c.Min, c.Max)
		if c.Mean != nil {
			s += fmt.Sprintf(", mean %.4g", *c.Mean)
		}
		if c.Std != nil {
			s += fmt.Sprintf(", std %.4g", *c.Std)
		}
		parts = append(parts, s)
	case tables.TypeDate, tables.TypeDatetime:
		parts = append(parts, fmt.Sprintf("%v to %v", c.Min, c.Max))
	case tables.TypeText, tables.TypeBool:
		d := fmt.Sprintf("%d distinct", c.Distinct)
		if c.DistinctCapped {
			d = fmt.Sprintf("%d+ distinct", c.Distinct)
		}
		var top []string
		for _, v := range c.Top {
			top = append(top, fmt.Sprintf("%q (%d)", v.Value, v.Count))
		}
		if len(top) > 0 {
			d += "; most frequent: " + strings.Join(top, ", ")
		}
		parts = append(parts, d)
	}
	s := fmt.Sprintf("%s (%s)", c.Name, c.Type)
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, "; ")
	}
	return s
}
