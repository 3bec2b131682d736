package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sandchat/sandchat"
)

const (
	benchCrowd      = "burst of 100 new conversations, 50 at a time (wall)"
	benchCrowdOK    = "  of them answered 11"
	benchCrowdBusy  = "  of them refused 429 (at capacity)"
	crowdSize       = 100
	crowdConcurrent = 50
)

// crowdRows runs 100 new conversations, 50 at a time, each `x = 11`, through Execute as
// the API does, and reports the wall time and how each was answered: a run either
// answers 11 or is refused with a clear 429; anything else fails the bench.
func crowdRows(ctx context.Context, e *Engine, log io.Writer) ([]BenchRow, error) {
	fmt.Fprintln(log, "measuring:", benchCrowd)
	var (
		mu       sync.Mutex
		ok, busy int
		errs     []error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, crowdConcurrent)
	t0 := time.Now()
	for i := range crowdSize {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			key := fmt.Sprintf("bench:crowd:%d", i)
			r, err := e.Execute(ctx, key, Request{Code: "x = 11\nx"})
			mu.Lock()
			defer mu.Unlock()
			var se *sandchat.Error
			switch {
			case err == nil && r.Status == StatusSuccess && r.Result != nil && *r.Result == "11":
				ok++
			case errors.As(err, &se) && se.Code == sandchat.EBUSY && se.RetryAfter > 0:
				busy++
			case err != nil:
				errs = append(errs, fmt.Errorf("conversation %d: %w", i, err))
			default:
				errs = append(errs, fmt.Errorf("conversation %d: %s %v", i, r.Status, r.Error))
			}
		})
	}
	wg.Wait()
	wall := ms(time.Since(t0))
	for i := range crowdSize {
		_ = e.Reset(ctx, fmt.Sprintf("bench:crowd:%d", i))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	pct := func(n int) []float64 { return []float64{100 * float64(n) / crowdSize} }
	return []BenchRow{
		{Name: benchCrowd, Unit: "ms", P50: wall, P95: wall},
		row(benchCrowdOK, "%", pct(ok), 0),
		row(benchCrowdBusy, "%", pct(busy), 0),
	}, nil
}

const benchNeighbour = "warm run beside two sessions spinning (Python, a JS worker thread)"

// neighbourRow times a session's warm durable run while two other sessions burn CPU,
// one in a Python loop and one in a node:worker_threads Worker: each session process
// is a kernel autogroup of its own, which keeps the neighbour's runs quick on a node
// whose cores the spinners would otherwise take.
func neighbourRow(ctx context.Context, e *Engine, n int, log io.Writer) (BenchRow, error) {
	fmt.Fprintln(log, "measuring:", benchNeighbour)
	spin := map[string]string{
		"bench:spin:py": "while True:\n    pass",
		"bench:spin:js": "import js, time\njs.eval(\"(async () => { const { Worker } = await import('node:worker_threads'); globalThis.w = new Worker('for (;;) {}', { eval: true }) })()\")\ntime.sleep(60)",
	}
	spinCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for key, code := range spin {
		wg.Go(func() { _, _ = e.Execute(spinCtx, key, Request{Code: code, Timeout: 2 * time.Minute}) })
	}
	defer func() {
		stop()
		wg.Wait()
		for key := range spin {
			_ = e.Reset(context.WithoutCancel(ctx), key)
		}
	}()
	if r, err := e.Execute(ctx, "bench:neighbour", Request{Code: "x = 0"}); err != nil || r.Status != StatusSuccess {
		return BenchRow{}, fmt.Errorf("neighbour: %v %s", err, r.Status)
	}
	time.Sleep(time.Second) // the spinners are up
	var samples []float64
	for range max(n, 20) {
		t0 := time.Now()
		if r, err := e.Execute(ctx, "bench:neighbour", Request{Code: "x += 1"}); err != nil || r.Status != StatusSuccess {
			return BenchRow{}, fmt.Errorf("neighbour: %v %s", err, r.Status)
		}
		samples = append(samples, ms(time.Since(t0)))
	}
	_ = e.Reset(ctx, "bench:neighbour")
	return row(benchNeighbour, "ms", samples, 30), nil
}
