package toolkits_test

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/conversations/pgstore"
	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/toolkits"
	"github.com/sandchat/sandchat/toolkits/tables"
	"github.com/sandchat/sandchat/toolkits/tables/tablestest"
)

// BenchmarkDescribeStored describes, as the data analysis tool does (Tables.Preview:
// the file opened in the conversations' store, read from Postgres block by block while
// it is scanned), a 100 MiB CSV and a 10 MB workbook (toolkits/tables/tablestest) that
// the benchmark stored as a run's files, against plain reads of the same file from the
// same store in the same run: its blocks read through (floor=store-read, the read
// describe does) and the whole value in one query (floor=store-whole, File), and its
// bytes in memory (floor=memory). describe reports its time over each floor's
// (x-store-read, x-store-whole, x-memory, ratios within the run) and its peak heap
// (sampled in a run of its own); store-whole reports its peak heap too; interleaved
// measures the ratios again, each pass reading and describing in turn.
func BenchmarkDescribeStored(b *testing.B) {
	b.Run("csv", func(b *testing.B) {
		describeStored(b, "big.csv", tablestest.CSV(tablestest.CSVBytes()), func(t *tables.Table) bool {
			return t.Sheets[0].Columns[2].Type == tables.TypeDate
		})
	})
	b.Run("xlsx", func(b *testing.B) {
		rows := tablestest.WorkbookRows()
		data, err := tablestest.Workbook(rows)
		if err != nil {
			b.Fatal(err)
		}
		describeStored(b, "big.xlsx", data, func(t *tables.Table) bool {
			return t.Sheets[0].Rows == int64(rows) && t.Sheets[0].Columns[2].Type == tables.TypeDate
		})
	})
}

func describeStored(b *testing.B, name string, data []byte, ok func(*tables.Table) bool) {
	ctx := context.Background()
	db := testenv.DB(b)
	store := pgstore.New(db, time.Hour)
	var uid int64
	if err := db.QueryRow(ctx, `insert into users (name) values ('bench') returning id`).Scan(&uid); err != nil {
		b.Fatal(err)
	}
	ctx = sandchat.WithUser(ctx, &sandchat.User{ID: uid, Name: "bench"})
	conv, err := store.CreateConversation(ctx, nil, "bench")
	if err != nil {
		b.Fatal(err)
	}
	// Stored as a run's file: uploads are bounded well below the sizes measured here.
	ex := conversations.Execution{ConversationID: conv.ID, SessionKey: "bench", Code: "write the table"}
	exID, err := store.BeginExecution(ctx, ex)
	if err != nil {
		b.Fatal(err)
	}
	ex.Outcome = sandchat.RunOutcome{Status: sandchat.StatusSuccess, Artifacts: []sandchat.Artifact{{Name: name, ContentType: "application/octet-stream", Data: data}}}
	ex.Quota = conversations.Quota{Limit: 1 << 40}
	refs, _, err := store.FinishExecution(ctx, exID, ex, "")
	if err != nil || len(refs) != 1 {
		b.Fatalf("store the file: %v %+v", err, refs)
	}
	fileID, size := refs[0].ID, int64(len(data))
	b.Logf("%s: %.1f MB", name, float64(size)/1e6)

	floors := map[string]float64{} // ns/op
	measured := func(b *testing.B) float64 { return float64(b.Elapsed().Nanoseconds()) / float64(b.N) }
	readStore := func(b *testing.B) {
		f, r, err := store.OpenFile(ctx, fileID)
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		if n, err := io.Copy(io.Discard, io.NewSectionReader(r, 0, f.Size)); err != nil || n != size {
			b.Fatal(n, err)
		}
	}
	readWhole := func(b *testing.B) {
		if _, whole, err := store.File(ctx, fileID); err != nil || int64(len(whole)) != size {
			b.Fatal(err)
		}
	}
	d := &toolkits.Tables{Files: store}
	describe := func(b *testing.B) {
		t, err := d.Preview(ctx, conv.ID, fileID, "", 0, 5)
		if err != nil || !ok(t) {
			b.Fatalf("%v %+v", err, t)
		}
	}
	b.Run("floor=memory", func(b *testing.B) {
		b.SetBytes(size)
		buf := make([]byte, 64<<10)
		for b.Loop() {
			if _, err := io.CopyBuffer(io.Discard, onlyReader{bytes.NewReader(data)}, buf); err != nil {
				b.Fatal(err)
			}
		}
		floors["memory"] = measured(b)
	})
	data = nil // what the server does not hold either
	runtime.GC()
	b.Run("floor=store-read", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			readStore(b)
		}
		floors["store-read"] = measured(b)
	})
	b.Run("floor=store-whole", func(b *testing.B) {
		b.SetBytes(size)
		peak := tablestest.PeakHeap(func() { readWhole(b) })
		for b.Loop() {
			readWhole(b)
		}
		floors["store-whole"] = measured(b)
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	})
	b.Run("describe", func(b *testing.B) {
		b.SetBytes(size)
		peak := tablestest.PeakHeap(func() { describe(b) })
		for b.Loop() {
			describe(b)
		}
		took := measured(b)
		for _, f := range []string{"store-read", "store-whole", "memory"} {
			b.ReportMetric(took/floors[f], "x-"+f)
		}
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	})
	// The machine's load moves between the runs above: here each pass reads the file
	// both ways and describes it, and the ratios are of their sums (its ns/op is a
	// pass of all three).
	b.Run("interleaved", func(b *testing.B) {
		var read, whole, desc time.Duration
		for b.Loop() {
			t0 := time.Now()
			readStore(b)
			t1 := time.Now()
			readWhole(b)
			t2 := time.Now()
			describe(b)
			read, whole, desc = read+t1.Sub(t0), whole+t2.Sub(t1), desc+time.Since(t2)
		}
		b.ReportMetric(float64(desc)/float64(read), "x-store-read")
		b.ReportMetric(float64(desc)/float64(whole), "x-store-whole")
	})
}

// onlyReader hides a bytes.Reader's WriteTo, so that reading it copies its bytes (into
// a 64 KiB buffer) as reading a file does.
type onlyReader struct{ io.Reader }
