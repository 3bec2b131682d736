package tables

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
)

// Formats a file can be read as.
const (
	CSV   = "csv"
	TSV   = "tsv"
	JSONL = "jsonl"
	XLSX  = "xlsx"
)

// Column types.
const (
	TypeInteger  = "integer"
	TypeFloat    = "float"
	TypeBool     = "bool"
	TypeDate     = "date"
	TypeDatetime = "datetime"
	TypeText     = "text"
	TypeEmpty    = "empty" // no value in any row
)

// Limits bound what one Scan holds, whatever its input.
type Limits struct {
	MaxRecordBytes int   // one record (a CSV line with its quoted newlines, a JSON line)
	MaxColumns     int   // columns described; wider rows are counted, not described
	MaxDistinct    int   // distinct values tracked per column
	MaxTop         int   // most frequent values reported per text column
	MaxCellBytes   int   // a cell as shown in rows, names and frequent values
	MaxRows        int   // rows one Request may ask for
	MaxSheets      int   // sheets of a workbook described
	MaxFileBytes   int64 // a workbook's own size
	MaxZipEntries  int
	MaxUnzipBytes  int64 // a workbook's parts, each and together, as their zip headers declare them
	// MaxSharedStrings bounds a workbook's shared strings in number (4 bytes each are
	// held); SharedStringsMemory is how many bytes of their text are held in memory, the
	// rest going to a temp file.
	MaxSharedStrings    int
	SharedStringsMemory int
	TempDir             string // for that temp file; "" is the system's
}

// DefaultLimits keep a Scan within a few tens of MiB: 256 columns × 1000 distinct values
// of at most 64 bytes each is the largest part, about 25 MiB; a workbook's shared
// strings hold at most 16 MiB more (4 M strings' offsets) and 8 MiB of their text.
var DefaultLimits = Limits{
	MaxRecordBytes:      1 << 20,
	MaxColumns:          256,
	MaxDistinct:         1000,
	MaxTop:              5,
	MaxCellBytes:        256,
	MaxRows:             100,
	MaxSheets:           32,
	MaxFileBytes:        32 << 20,
	MaxZipEntries:       10000,
	MaxUnzipBytes:       256 << 20,
	MaxSharedStrings:    4 << 20,
	SharedStringsMemory: 8 << 20,
}

// Request says what of a file to read.
type Request struct {
	// Name is the file's name; its extension chooses the reader.
	Name string
	// Sheet names one sheet of a workbook; "" is the first, unless AllSheets.
	Sheet     string
	AllSheets bool
	// Offset and Rows choose the rows returned (data rows, the header not counted).
	Offset int64
	Rows   int
}

// Table is what a Scan found.
type Table struct {
	Format    string `json:"format"`
	Size      int64  `json:"size"`
	Encoding  string `json:"encoding,omitempty"`
	Delimiter string `json:"delimiter,omitempty"`
	// SheetNames are all of a workbook's sheets, in order; Sheets are those described.
	SheetNames []string `json:"sheet_names,omitempty"`
	Sheets     []Sheet  `json:"sheets"`
	Notes      []string `json:"notes,omitempty"`
}

// Sheet is one table: a workbook's sheet, or the whole of a CSV or JSON Lines file.
type Sheet struct {
	Name   string `json:"name,omitempty"`
	Header bool   `json:"header"`
	// Rows counts data rows; ColumnCount the widest row's cells, of which the first
	// Limits.MaxColumns are described in Columns.
	Rows        int64    `json:"rows"`
	ColumnCount int      `json:"column_count"`
	Columns     []Column `json:"columns"`
	// Offset is the index of the first of Data among the data rows.
	Offset int64      `json:"offset"`
	Data   [][]string `json:"data"`
	Notes  []string   `json:"notes,omitempty"`
}

// Column is one column's profile. Min and Max are numbers for integer and float
// columns and ISO strings for date and datetime ones.
type Column struct {
	Name           string   `json:"name"`
	Type           string   `json:"type"`
	Nulls          int64    `json:"nulls"`
	Distinct       int      `json:"distinct"`
	DistinctCapped bool     `json:"distinct_capped,omitempty"` // at least Distinct
	Min            any      `json:"min,omitempty"`
	Max            any      `json:"max,omitempty"`
	Mean           *float64 `json:"mean,omitempty"`
	Std            *float64 `json:"std,omitempty"`
	Top            []Count  `json:"top,omitempty"`
}

// Count is a value and how many rows hold it.
type Count struct {
	Value string `json:"value"`
	Count int64  `json:"count"`
}

// ErrorKind says why a file could not be read as a table.
type ErrorKind int

const (
	// NotATable: the file's type is not one this package reads, or its bytes are not
	// what its extension says.
	NotATable ErrorKind = iota + 1
	// Malformed: the right kind of file, but broken (a JSON line that is not an
	// object, a record over the limit, a corrupt workbook).
	Malformed
	// TooLarge: over a limit that protects the server (a workbook's declared parts).
	TooLarge
)

// Error is a file that could not be read as a table; Message is for people.
type Error struct {
	Kind    ErrorKind
	Message string
}

func (e *Error) Error() string { return e.Message }

func errorf(kind ErrorKind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// FormatOf is the format a file name's extension says, or "".
func FormatOf(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".csv":
		return CSV
	case ".tsv", ".tab":
		return TSV
	case ".jsonl", ".ndjson":
		return JSONL
	case ".xlsx", ".xlsm":
		return XLSX
	}
	return ""
}

// Scan reads the file r (size bytes) once and describes it. A file this package cannot
// read as a table gives an *Error; ctx stops a long scan.
func Scan(ctx context.Context, r io.ReaderAt, size int64, req Request, lim Limits) (*Table, error) {
	if req.Rows < 0 || req.Offset < 0 {
		return nil, errorf(Malformed, "offset and rows must not be negative")
	}
	req.Rows = min(req.Rows, lim.MaxRows)
	t := &Table{Size: size, Sheets: []Sheet{}}
	var err error
	switch t.Format = FormatOf(req.Name); t.Format {
	case CSV, TSV:
		err = scanDelimited(ctx, r, size, req, lim, t)
	case JSONL:
		err = scanJSONL(ctx, r, size, req, lim, t)
	case XLSX:
		err = scanXLSX(ctx, r, size, req, lim, t)
	default:
		ext := path.Ext(req.Name)
		if ext == "" {
			ext = "without an extension"
		}
		return nil, errorf(NotATable, "%s is not a table: files %s are not read; CSV (.csv, .tsv), JSON Lines (.jsonl) and Excel (.xlsx) are.", path.Base(req.Name), ext)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}
