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
//   - xlsx.go: Excel workbooks: the zip's declared sizes checked, then each sheet
//     described (its parts unpacked with github.com/klauspost/compress/flate);
//     sheetcsv.go writes sheets as CSV (the copies Python reads);
//   - workbook.go: what describes a workbook (its sheets and their parts, its date
//     system, what its cell styles' number formats say of dates, its shared strings,
//     bounded in memory);
//   - sheetrows.go: a sheet's rows, read streaming from its XML: shared and inline
//     strings, booleans, errors, numbers as Excel shows them, dates through the cell's
//     style, formulas as their cached values; the commonest cells in one pass each,
//     their values in place, with what their type says of them for the profile;
//   - xmlscan.go: the XML scanner those read with, in place, without allocating;
//   - readahead.go, rowsahead.go: a file is read on two cores: a CSV or JSON Lines file
//     is parsed in a goroutine of its own, a few batches of rows ahead of its profile; a
//     workbook's sheet is unpacked in one, a few buffers ahead of its parsing, which
//     profiles each row as it reads it;
//   - fuzz_test.go: a fuzz target for each reader of an uploaded file (delimited, JSON
//     Lines, the encodings, the XML scanner, a sheet's rows, in buffers of any size, a
//     workbook's parts, its zip), seeded from testdata/fuzz; make fuzz runs each.
//
// Bounds hold whatever the input: a record (a line, or a quoted field's lines, a sheet's
// row or cell) is at most Limits.MaxRecordBytes; Limits.MaxColumns columns are described
// (the rest counted); each column tracks at most Limits.MaxDistinct distinct values; a
// workbook's parts are checked against Limits.MaxUnzipBytes before any is read, and
// archive/zip stops any part at its declared size; a workbook's shared strings are at
// most Limits.MaxSharedStrings, of which Limits.SharedStringsMemory bytes stay in memory
// (the rest go to a temp file); an XML tag is at most 256 KiB. Nothing in a cell is
// evaluated: =HYPERLINK(...) in a CSV is text, and a workbook's formulas give their
// cached values.
package tables
