// Package tables reads the tables people attach to a conversation — CSV and TSV, JSON
// Lines, Excel .xlsx — once, streaming, in bounded memory, and describes them: per
// column an inferred type, nulls, a bounded distinct count, number and date ranges, the
// most frequent values, and a window of rows. It is pure: bytes in, a Table out; the
// conversation's files and who may read them are the caller's (toolkits.DataAnalysis).
//
// The map:
//   - tables.go: the API (Scan, Request, Table, Sheet, Column, Error) and the limits;
//   - profile.go: one sheet's pass over its records: header sniffing, the row window, and
//     each column's statistics and type;
//   - values.go: what one cell is (null, integer, float, bool, date, datetime, text);
//   - delimited.go: CSV and TSV: encoding (BOM, UTF-8, Latin-1 fallback), delimiter
//     sniffing and a record reader bounded in bytes and columns;
//   - jsonl.go: JSON Lines, one object per line, columns in first-seen key order;
//   - xlsx.go: Excel workbooks through github.com/xuri/excelize/v2, after the zip's
//     declared sizes were checked; cached values of formulas, dates as ISO dates.
//
// Bounds hold whatever the input: a record (a line, or a quoted field's lines) is at most
// Limits.MaxRecordBytes; Limits.MaxColumns columns are described (the rest counted);
// each column tracks at most Limits.MaxDistinct distinct values; a workbook's parts are
// checked against Limits.MaxUnzipBytes and Limits.MaxUnzipMemory before any is read, and
// archive/zip stops any part at its declared size. Nothing in a cell is evaluated:
// =HYPERLINK(...) in a CSV is text, and a workbook's formulas give their cached values.
package tables
