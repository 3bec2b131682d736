// Package tablestest makes the large tables the benchmarks of toolkits/tables and of
// the data analysis tool describe. It is for tests only: it writes workbooks with
// excelize.
package tablestest

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xuri/excelize/v2"
)

// CSVBytes is the size of the benchmarks' CSV: SANDCHAT_BENCH_CSV_MB MiB, 100 unless set.
func CSVBytes() int64 {
	if v, err := strconv.Atoi(os.Getenv("SANDCHAT_BENCH_CSV_MB")); err == nil && v > 0 {
		return int64(v) << 20
	}
	return 100 << 20
}

// WorkbookRows is the number of rows of the benchmarks' workbook:
// SANDCHAT_BENCH_XLSX_ROWS, 300 000 unless set (about 10 MB).
func WorkbookRows() int {
	if v, err := strconv.Atoi(os.Getenv("SANDCHAT_BENCH_XLSX_ROWS")); err == nil && v > 0 {
		return v
	}
	return 300_000
}

var cities = []string{"Paris", "Lyon", "Lille", "Nantes", "Nice", "Brest"}

// CSV is a CSV of about size bytes: an id, a float, a date, a bool, a city and a free
// text column, with a header.
func CSV(size int64) []byte {
	out := make([]byte, 0, size+128)
	out = append(out, "id,amount,day,paid,city,note\n"...)
	for i := 0; int64(len(out)) < size; i++ {
		out = fmt.Appendf(out, "%d,%d.%02d,2024-%02d-%02d,%t,%s,order number %d for customer %d\n",
			i, i%10000, i%100, i%12+1, i%28+1, i%3 == 0, cities[i%len(cities)], i, i%7919)
	}
	return out
}

// Workbook is a one-sheet .xlsx of rows data rows under a header: an id, an amount, a
// day (a number formatted as a date), a city and a free text column, written by
// excelize's stream writer (its strings inline, as that writer writes them).
func Workbook(rows int) ([]byte, error) {
	f := excelize.NewFile()
	defer f.Close()
	sw, err := f.NewStreamWriter("Sheet1")
	if err != nil {
		return nil, err
	}
	dateStyle, err := f.NewStyle(&excelize.Style{NumFmt: 14})
	if err != nil {
		return nil, err
	}
	if err := sw.SetRow("A1", []any{"id", "amount", "day", "city", "note"}); err != nil {
		return nil, err
	}
	day := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 2; i <= rows+1; i++ {
		cell, _ := excelize.CoordinatesToCellName(1, i)
		err := sw.SetRow(cell, []any{i, float64(i%10000) / 100, excelize.Cell{StyleID: dateStyle, Value: day.AddDate(0, 0, i%366)},
			cities[i%len(cities)], fmt.Sprintf("order %d for customer %d", i, i%7919)})
		if err != nil {
			return nil, err
		}
	}
	if err := sw.Flush(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := f.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// CPU is the CPU time (user and system) the process has used so far, all its threads':
// a benchmark's figure that the machine's load moves far less than its wall time.
func CPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// PeakHeap runs fn and returns by how much the heap grew at most meanwhile, from a
// collected start, sampled every millisecond in a goroutine of its own: live objects and
// the garbage not yet collected, as the process holds them.
func PeakHeap(fn func()) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
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
	})
	fn()
	close(stop)
	wg.Wait()
	return max(peak.Load(), base) - base
}
