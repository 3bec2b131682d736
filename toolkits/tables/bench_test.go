package tables_test

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xuri/excelize/v2"

	"github.com/sandchat/sandchat/toolkits/tables"
)

// benchBytes is the size of the benchmarks' CSV (SANDCHAT_BENCH_CSV_MB, default 100).
func benchBytes() int64 {
	if v, err := strconv.Atoi(os.Getenv("SANDCHAT_BENCH_CSV_MB")); err == nil && v > 0 {
		return int64(v) << 20
	}
	return 100 << 20
}

// writeCSV writes a CSV of about size bytes: an id, a float, a date, a bool, a city
// and a free text column.
func writeCSV(b *testing.B, path string, size int64) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	cities := []string{"Paris", "Lyon", "Lille", "Nantes", "Nice", "Brest"}
	fmt.Fprintln(w, "id,amount,day,paid,city,note")
	var n int64
	for i := 0; n < size; i++ {
		k, _ := fmt.Fprintf(w, "%d,%d.%02d,2024-%02d-%02d,%t,%s,order number %d for customer %d\n",
			i, i%10000, i%100, i%12+1, i%28+1, i%3 == 0, cities[i%len(cities)], i, i%7919)
		n += int64(k)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
}

// peakHeap samples the live heap while fn runs and returns its highest value.
func peakHeap(fn func()) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	fn()
	close(stop)
	wg.Wait()
	return peak.Load()
}

// BenchmarkDescribeCSV compares describing a large CSV with plain reads of the same
// file in the same run: its bytes (io.Copy), its lines (bufio), its records
// (encoding/csv). Each reports MB/s; describe also its peak live heap.
func BenchmarkDescribeCSV(b *testing.B) {
	path := filepath.Join(b.TempDir(), "big.csv")
	writeCSV(b, path, benchBytes())
	st, _ := os.Stat(path)
	open := func(b *testing.B) *os.File {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		return f
	}
	b.Run("floor=read", func(b *testing.B) {
		b.SetBytes(st.Size())
		for b.Loop() {
			f := open(b)
			if _, err := io.Copy(io.Discard, f); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor=lines", func(b *testing.B) {
		b.SetBytes(st.Size())
		for b.Loop() {
			r := bufio.NewReaderSize(open(b), 64<<10)
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
		b.SetBytes(st.Size())
		for b.Loop() {
			r := csv.NewReader(bufio.NewReaderSize(open(b), 64<<10))
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
		b.SetBytes(st.Size())
		describe := func() {
			t, err := tables.Scan(context.Background(), open(b), st.Size(), tables.Request{Name: "big.csv", Rows: 5}, tables.DefaultLimits)
			if err != nil || t.Sheets[0].Columns[2].Type != tables.TypeDate {
				b.Fatalf("%v %+v", err, t)
			}
		}
		// The heap is sampled in a run of its own: sampling stops the world.
		peak := peakHeap(describe)
		for b.Loop() {
			describe()
		}
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	})
}

// BenchmarkDescribeXLSX: a workbook of one sheet (SANDCHAT_BENCH_XLSX_ROWS rows,
// default 300 000: about 10 MB), described, against a plain read of its bytes.
func BenchmarkDescribeXLSX(b *testing.B) {
	rows := 300_000
	if v, err := strconv.Atoi(os.Getenv("SANDCHAT_BENCH_XLSX_ROWS")); err == nil && v > 0 {
		rows = v
	}
	path := filepath.Join(b.TempDir(), "big.xlsx")
	f := excelize.NewFile()
	sw, err := f.NewStreamWriter("Sheet1")
	if err != nil {
		b.Fatal(err)
	}
	sw.SetRow("A1", []any{"id", "amount", "city", "note"})
	for i := 2; i <= rows+1; i++ {
		cell, _ := excelize.CoordinatesToCellName(1, i)
		sw.SetRow(cell, []any{i, float64(i%10000) / 100, []string{"Paris", "Lyon", "Nice"}[i%3], fmt.Sprintf("order %d for customer %d", i, i%7919)})
	}
	if err := sw.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.SaveAs(path); err != nil {
		b.Fatal(err)
	}
	f.Close()
	st, _ := os.Stat(path)
	b.Logf("workbook: %d rows, %.1f MB", rows, float64(st.Size())/1e6)
	b.Run("floor=read", func(b *testing.B) {
		b.SetBytes(st.Size())
		for b.Loop() {
			data, err := os.ReadFile(path)
			if err != nil || len(data) == 0 {
				b.Fatal(err)
			}
		}
	})
	b.Run("describe", func(b *testing.B) {
		b.SetBytes(st.Size())
		describe := func() {
			fh, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer fh.Close()
			t, err := tables.Scan(context.Background(), fh, st.Size(), tables.Request{Name: "big.xlsx", Rows: 5, AllSheets: true}, tables.DefaultLimits)
			if err != nil || t.Sheets[0].Rows != int64(rows) || t.Sheets[0].Columns[1].Type != tables.TypeFloat {
				b.Fatalf("%v %+v", err, t)
			}
		}
		peak := peakHeap(describe)
		for b.Loop() {
			describe()
		}
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	})
}
