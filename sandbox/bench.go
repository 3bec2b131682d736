package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// BenchRow is one line of the benchmark table.
type BenchRow struct {
	Name   string
	Unit   string // "ms", "KB", "MB"
	P50    float64
	P95    float64
	Target float64 // 0: none
	// Fresh marks the row of a fresh Deno + Pyodide per run, the yardstick of the
	// others; Ratio asks for the comparison with it: RatioFaster (a fresh start is N×
	// slower than this row) or RatioStarts (this row took as long as N fresh starts).
	Fresh bool
	Ratio string
}

// The comparisons a BenchRow asks for.
const (
	RatioFaster = "faster"
	RatioStarts = "starts"
)

// Met says whether the row's median meets its target; ok is false when it has none.
func (r BenchRow) Met() (met, ok bool) { return r.P50 <= r.Target, r.Target > 0 }

const (
	benchEngineOnly  = "warm run, engine only (x += 1)"
	benchWarmPersist = "warm run + durable state in Redis"
	benchNewConv     = "first run of a new conversation (warm pool)"
	benchBurstCold   = "burst of 8 new conversations, pool at its floor"
	benchBurstWarm   = "burst of 8 new conversations, pool sized by demand"
	benchColdRestore = "cold restore from Redis + run"
	benchDelta       = "state of a small session (zstd heap delta)"
	benchRSS         = "RSS per live session process"
	benchPSS         = "PSS per idle live session process"
	benchSparePSS    = "PSS per spare process (waiting for a restore)"
	benchFresh       = "fresh Deno + Pyodide per run (no state kept)"
)

// burst is how many conversations start at once in the burst rows.
const burst = 8

// BenchRows measures the engine on this machine, as cfg sets it (the deployment's
// settings, the shipped defaults unless they say otherwise), through the engine's own
// methods: p50/p95 for the numbers the design sets targets for, plus a fresh Deno +
// Pyodide per run (the cost model of sandboxes that keep no state) to compare with. Its
// sessions live in scratch, a store made for the
// measurement (the caller empties it); the deployment's base snapshot is taken from
// main when it has one, so the bench measures sessions, not a Pyodide boot. n is the
// number of samples per metric (the fresh-process one takes at most 5); progress goes
// to log.
func BenchRows(ctx context.Context, cfg Config, main, scratch Store, n int, log io.Writer) ([]BenchRow, error) {
	if n < 1 {
		n = 1
	}
	cfg = Locate(cfg)
	e, err := New(cfg, scratch, nil)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	build := buildID(e.cfg, mustDenoVersion(ctx, e.cfg.DenoPath), pyodideVersion(e.cfg.PyodideDir))
	if h, _ := main.BaseFor(ctx, build); h != "" {
		if snap, _ := main.LoadBase(ctx, h); snap != nil {
			if _, err := scratch.PublishBase(ctx, build, h, snap); err != nil {
				return nil, err
			}
		}
	}
	fmt.Fprintln(log, "starting the engine…")
	if err := e.Start(ctx); err != nil {
		return nil, err
	}
	if ok, why := e.Available(); !ok {
		return nil, fmt.Errorf("sandbox unavailable: %s", why)
	}
	fmt.Fprintln(log, "isolation:", e.rt.isolation)
	var rows []BenchRow
	must := func(key, code string) (Result, error) {
		r, err := e.Execute(ctx, key, Request{Code: code})
		if err == nil && r.Status != StatusSuccess {
			err = fmt.Errorf("%s: %s %v", code, r.Status, r.Error)
		}
		return r, err
	}

	// Engine only: the Go → control thread → Worker → Python round trip, without Redis.
	fmt.Fprintln(log, "measuring:", benchEngineOnly)
	if _, err := must("bench:warm", "x = 0"); err != nil {
		return nil, err
	}
	// The warm rows are for a quiet machine: the pool's refill (the session took a
	// pooled process) finishes first.
	if err := waitPool(ctx, e); err != nil {
		return nil, err
	}
	// Its heap is saved first, so no checkpoint comes during the measurement; nothing else
	// takes its process meanwhile (the engine is the bench's own).
	if err := e.sess.checkpoint(ctx, "bench:warm"); err != nil {
		return nil, err
	}
	p := e.sess.process("bench:warm")
	if p == nil {
		return nil, fmt.Errorf("the bench session is not live")
	}
	var samples []float64
	for range max(n, 20) {
		t0 := time.Now()
		if _, err := p.Call(ctx, proc.RunReq{Op: "run", Code: "x += 1", Filename: "<bench>", Data: []proc.DataFile{}}, nil); err != nil {
			return nil, err
		}
		samples = append(samples, ms(time.Since(t0)))
	}
	p.Freeze()
	rows = append(rows, row(benchEngineOnly, "ms", samples, 2))

	fmt.Fprintln(log, "measuring:", benchWarmPersist)
	samples = samples[:0]
	for range max(n, 20) {
		t0 := time.Now()
		if _, err := must("bench:warm", "x += 1"); err != nil {
			return nil, err
		}
		samples = append(samples, ms(time.Since(t0)))
	}
	rows = append(rows, row(benchWarmPersist, "ms", samples, 10))

	fmt.Fprintln(log, "measuring:", benchNewConv)
	samples = samples[:0]
	for i := range n {
		if err := waitPool(ctx, e); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if _, err := must(fmt.Sprintf("bench:new:%d", i), "x = 1"); err != nil {
			return nil, err
		}
		samples = append(samples, ms(time.Since(t0)))
		e.Reset(ctx, fmt.Sprintf("bench:new:%d", i))
	}
	rows = append(rows, row(benchNewConv, "ms", samples, 100))

	// Bursts: the first finds the pool at its configured floor; the pool then sizes
	// itself by that demand, and the second finds it ready.
	for _, name := range []string{benchBurstCold, benchBurstWarm} {
		fmt.Fprintln(log, "measuring:", name)
		if err := waitPool(ctx, e); err != nil {
			return nil, err
		}
		times := make([]float64, burst)
		errs := make([]error, burst)
		var wg sync.WaitGroup
		for i := range burst {
			wg.Go(func() {
				key := fmt.Sprintf("bench:%s:%d", name, i)
				t0 := time.Now()
				_, errs[i] = must(key, "x = 1")
				times[i] = ms(time.Since(t0))
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		for i := range burst {
			e.Reset(ctx, fmt.Sprintf("bench:%s:%d", name, i))
		}
		target := 0.0
		if name == benchBurstWarm {
			target = 100
		}
		rows = append(rows, row(name, "ms", times, target))
	}

	crowd, err := crowdRows(ctx, e, log)
	if err != nil {
		return nil, err
	}
	rows = append(rows, crowd...)
	neighbour, err := neighbourRow(ctx, e, n, log)
	if err != nil {
		return nil, err
	}
	rows = append(rows, neighbour)

	fmt.Fprintln(log, "measuring:", benchColdRestore, "and", benchDelta)
	samples = samples[:0]
	var sizes []float64
	for i := range n {
		key := fmt.Sprintf("bench:cold:%d", i)
		if _, err := must(key, "x = 1\ndef f(a):\n    return a + x\nclass K:\n    pass\nk = K()"); err != nil {
			return nil, err
		}
		// Evicted as the engine evicts: the heap is checkpointed, then the process goes.
		if !e.sess.evict(key, "bench") {
			return nil, fmt.Errorf("session %s is not live", key)
		}
		info, err := e.Session(ctx, key)
		if err != nil {
			return nil, err
		}
		sizes = append(sizes, float64(info.StateBytes)/1000)
		if err := waitPool(ctx, e); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if _, err := must(key, "f(1)"); err != nil {
			return nil, err
		}
		samples = append(samples, ms(time.Since(t0)))
		e.Reset(ctx, key)
	}
	rows = append(rows, row(benchColdRestore, "ms", samples, 400), row(benchDelta, "KB", sizes, 200))

	fmt.Fprintln(log, "measuring:", benchRSS, "and", benchPSS)
	var mem, pss, spare []float64
	var procs []*proc.Process
	for i := range 4 {
		key := fmt.Sprintf("bench:rss:%d", i)
		if _, err := must(key, "data = list(range(1000))"); err != nil {
			return nil, err
		}
		p := e.sess.process(key)
		if p == nil {
			return nil, fmt.Errorf("session %s is not live", key)
		}
		procs = append(procs, p)
	}
	// Idle: the runs have answered and the processes have settled (and been frozen).
	time.Sleep(time.Second)
	for _, p := range procs {
		mem = append(mem, float64(p.RSS())/1e6)
		pss = append(pss, float64(p.PSS())/(1<<20))
	}
	if err := waitPool(ctx, e); err != nil {
		return nil, err
	}
	for _, p := range e.pool.spareProcs() {
		spare = append(spare, float64(p.PSS())/(1<<20))
	}
	rows = append(rows, row(benchRSS, "MB", mem, 200), row(benchPSS, "MiB", pss, 120))
	if len(spare) > 0 {
		rows = append(rows, row(benchSparePSS, "MiB", spare, 0))
	}

	fmt.Fprintln(log, "measuring:", benchFresh)
	samples = samples[:0]
	for range min(n, 5) {
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, e.cfg.DenoPath, "run", "--no-prompt", "--no-config", "--quiet",
			"--allow-read="+e.cfg.PyodideDir, filepath.Join(e.cfg.RuntimeDir, "fresh.ts"), e.cfg.PyodideDir, "x = 1\nx + 1")
		cmd.Env = []string{"DENO_DIR=" + e.cacheDir, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"}
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "2" {
			return nil, fmt.Errorf("fresh pyodide: %v %s", err, out)
		}
		samples = append(samples, ms(time.Since(t0)))
	}
	rows = append(rows, row(benchFresh, "ms", samples, 0))
	for i, r := range rows {
		switch r.Name {
		case benchFresh:
			rows[i].Fresh = true
		case benchWarmPersist, benchEngineOnly, benchNewConv, benchColdRestore:
			rows[i].Ratio = RatioFaster
		case benchCrowd:
			rows[i].Ratio = RatioStarts
		}
	}
	return rows, nil
}

func mustDenoVersion(ctx context.Context, deno string) string {
	v, _ := denoVersion(ctx, deno)
	return v
}

// waitPool waits until the warm pool is full and idle, so a measurement is not
// competing with its refill.
func waitPool(ctx context.Context, e *Engine) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if e.pool.idle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("warm pool did not refill")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func row(name, unit string, samples []float64, target float64) BenchRow {
	s := slices.Clone(samples)
	slices.Sort(s)
	pick := func(q float64) float64 {
		if len(s) == 0 {
			return 0
		}
		return s[min(len(s)-1, int(q*float64(len(s)-1)+0.5))]
	}
	return BenchRow{Name: name, Unit: unit, P50: pick(0.5), P95: pick(0.95), Target: target}
}
