package proc

import (
	"context"
	"encoding/json"
	"time"
)

// RunLimits bound one run: Load is what loading the packages it imports (and /data)
// may take, until the process says its code started; Timeout is the code's own time;
// Grace is how long interrupted code has to stop.
type RunLimits struct{ Load, Timeout, Grace time.Duration }

// RunHooks receive what the process sends while a run goes on; nil ones refuse or drop.
type RunHooks struct {
	// Output gets each chunk of output; cut says the stream reached the output limit
	// with it (the process sends nothing more of that stream).
	Output  func(stream, chunk string, cut bool)
	Display func(kind, item string) error // an error kills the process
	Pip     func(seq int64, req json.RawMessage) PipDone
}

// RunEnd is how a run call ended.
type RunEnd struct {
	Frame       Frame
	Err         error
	Interrupted bool  // the time limit passed or ctx ended: the code was interrupted
	CtxErr      error // ctx's error, when it ended
	Stuck       bool  // the code ignored the interrupt for Grace: kill was called
	// Started: the process said the run's code started (its word, which code an earlier
	// run left behind could forge); false, nothing of the code ran.
	Started bool
}

// Run gives msg to the process and waits for its answer, h receiving what the process
// sends meanwhile. The run's time limit starts with its code: loading has its own
// bound, and the process says when it is done (once: a second word, which user code
// can forge, never extends the limit). At the limit, or when ctx ends, the code is
// interrupted; if it does not stop within Grace, kill is called (it must stop the
// process) and Run returns once the call has. Grace counts only time this server ran
// (awaitAwake): code is not killed for a pause it could not have stopped in.
func (p *Process) Run(ctx context.Context, msg RunReq, o *Blobs, lim RunLimits, h RunHooks, kill func()) RunEnd {
	started := make(chan struct{}, 1)
	p.setHooks(h, func() {
		select {
		case started <- struct{}{}:
		default:
		}
	})
	defer p.setHooks(RunHooks{}, nil)
	// The call's own deadline is the backstop: past the load, the run's timeout, the
	// grace and time to save, the process is killed whatever it is doing.
	hard, cancel := context.WithTimeout(context.Background(), lim.Load+lim.Timeout+lim.Grace+time.Minute)
	defer cancel()
	done := make(chan RunEnd, 1)
	sent := make(chan struct{})
	go func() {
		f, err := p.call(hard, msg, o, func() { close(sent) }, nil)
		done <- RunEnd{Frame: f, Err: err}
	}()
	timer := time.NewTimer(lim.Load)
	defer timer.Stop()
	var end RunEnd
	var ctxErr error
	interrupted := false
wait:
	for {
		select {
		case end = <-done:
		case <-started:
			timer.Reset(lim.Timeout)
			started = nil
			continue
		case <-timer.C:
			interrupted = true
		case <-ctx.Done():
			interrupted, ctxErr = true, ctx.Err()
		}
		break wait
	}
	if interrupted {
		// The interrupt follows the run's frame: one written before it would reach the
		// process first and be cleared as a stale one, and the code would run on.
		// Before the code starts the process takes in the run (its /data, its packages),
		// which the load bound covers: the interrupt reaches the code as it starts.
		grace := lim.Grace
		if started != nil {
			grace += lim.Load
		}
		select {
		case <-sent:
			p.interrupt()
			var ok bool
			if end, ok = awaitAwake(done, grace); !ok {
				kill()
				end = <-done
				end.Stuck = true
			}
		case end = <-done: // the run was never given to the process
		}
	}
	end.Interrupted, end.CtxErr = interrupted, ctxErr
	end.Started = started == nil
	if !end.Started {
		select {
		case <-started:
			end.Started = true
		default:
		}
	}
	return end
}

// A grace is counted in steps of awakeStep. A step that took over stoodStill means the
// server stood still meanwhile (a paused or starved VM, a stopped process, a suspended
// host): the session's process stood still with it, so the step counts as one step, not
// as its length.
const (
	awakeStep  = 100 * time.Millisecond
	stoodStill = time.Second
)

// awaitAwake waits for done for d of time in which this server ran: false, it did not
// come within it.
func awaitAwake(done <-chan RunEnd, d time.Duration) (RunEnd, bool) {
	t := time.NewTicker(awakeStep)
	defer t.Stop()
	for a := (awake{last: time.Now()}); ; {
		select {
		case end := <-done:
			return end, true
		case <-t.C:
			if a.add(time.Now(), d) {
				return RunEnd{}, false
			}
		}
	}
}

// awake sums the time a server ran, from the instants it looked at the clock.
type awake struct {
	ran  time.Duration
	last time.Time
}

// add counts the time up to now and tells whether d has been reached.
func (a *awake) add(now time.Time, d time.Duration) bool {
	step := now.Sub(a.last)
	if step > stoodStill {
		step = awakeStep
	}
	a.ran += step
	a.last = now
	return a.ran >= d
}
