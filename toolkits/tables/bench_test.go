package tables_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"io"
	"testing"

	"github.com/sandchat/sandchat/toolkits/tables"
	"github.com/sandchat/sandchat/toolkits/tables/tablestest"
)

// BenchmarkDescribeCSV describes a large CSV (tablestest.CSV) held in memory, against
// plain reads of the same bytes in the same run: the bytes (io.Copy), their lines
// (bufio), their records (encoding/csv). It measures the scan alone; the data analysis
// tool's benchmark (toolkits, BenchmarkDescribeStored) measures it as the product runs
// it, reading the file from the database.
func BenchmarkDescribeCSV(b *testing.B) {
	data := tablestest.CSV(tablestest.CSVBytes())
	size := int64(len(data))
	b.Run("floor=memory", func(b *testing.B) {
		b.SetBytes(size)
		buf := make([]byte, 64<<10)
		for b.Loop() {
			if _, err := io.CopyBuffer(io.Discard, onlyReader{bytes.NewReader(data)}, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor=lines", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			r := bufio.NewReaderSize(bytes.NewReader(data), 64<<10)
			for {
				if _, err := r.ReadSlice('\n'); err == io.EOF {
					break
				} else if err != nil && err != bufio.ErrBufferFull {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("floor=encoding-csv", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			r := csv.NewReader(bytes.NewReader(data))
			r.ReuseRecord = true
			for {
				if _, err := r.Read(); err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("describe", func(b *testing.B) {
		b.SetBytes(size)
		describe := func() {
			t, err := tables.Scan(context.Background(), bytes.NewReader(data), size, tables.Request{Name: "big.csv", Rows: 5}, tables.DefaultLimits)
			if err != nil || t.Sheets[0].Columns[2].Type != tables.TypeDate {
				b.Fatalf("%v %+v", err, t)
			}
		}
		peak := tablestest.PeakHeap(describe)
		cpu := tablestest.CPU()
		for b.Loop() {
			describe()
		}
		b.ReportMetric(float64(tablestest.CPU()-cpu)/float64(b.N)/1e6, "cpu-ms/op")
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	})
}

// BenchmarkDescribeXLSX describes a workbook of one sheet (tablestest.Workbook, about
// 10 MB) held in memory, against a plain read of its bytes.
func BenchmarkDescribeXLSX(b *testing.B) {
	rows := tablestest.WorkbookRows()
	data, err := tablestest.Workbook(rows)
	if err != nil {
		b.Fatal(err)
	}
	size := int64(len(data))
	b.Logf("workbook: %d rows, %.1f MB", rows, float64(size)/1e6)
	b.Run("floor=memory", func(b *testing.B) {
		b.SetBytes(size)
		buf := make([]byte, 64<<10)
		for b.Loop() {
			if _, err := io.CopyBuffer(io.Discard, onlyReader{bytes.NewReader(data)}, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("describe", func(b *testing.B) {
		b.SetBytes(size)
		describe := func() {
			t, err := tables.Scan(context.Background(), bytes.NewReader(data), size, tables.Request{Name: "big.xlsx", Rows: 5, AllSheets: true}, tables.DefaultLimits)
			if err != nil || t.Sheets[0].Rows != int64(rows) || t.Sheets[0].Columns[1].Type != tables.TypeFloat || t.Sheets[0].Columns[2].Type != tables.TypeDate {
				b.Fatalf("%v %+v", err, t)
			}
		}
		peak := tablestest.PeakHeap(describe)
		cpu := tablestest.CPU()
		for b.Loop() {
			describe()
		}
		b.ReportMetric(float64(tablestest.CPU()-cpu)/float64(b.N)/1e6, "cpu-ms/op")
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	})
}

// onlyReader hides a bytes.Reader's WriteTo, so that reading it copies its bytes (into
// a 64 KiB buffer) as reading a file does.
type onlyReader struct{ io.Reader }
