package sandbox

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// A run's conversation with its process: what the process sends while the code runs
// goes to the run's callbacks (wire), and the engine waits for the answer, interrupting
// the code at its limit (call).

// wired is a run's end of what its process sends while the code runs.
type wired struct {
	p    *proc.Process
	disp *displays   // display items, within their bounds
	seen *seenOutput // the output as it came: the answer when the process gives none
}

// wire sends p's output and display items to req's callbacks, and its package requests
// to pip, until unwire.
func (c *Config) wire(p *proc.Process, req Request, pip *pipServer) *wired {
	w := &wired{p: p,
		disp: &displays{max: c.MaxDisplays, maxBytes: c.MaxDisplayBytes, maxImage: max(c.MaxArtifactBytes, 1), on: req.OnDisplay},
		seen: &seenOutput{max: c.MaxOutput},
	}
	p.SetPip(pip.handle)
	p.SetOutput(func(stream, chunk string) {
		w.disp.wrote(stream, len(chunk))
		w.seen.add(stream, chunk)
		if req.OnOutput != nil {
			req.OnOutput(stream, chunk)
		}
	})
	p.SetDisplay(w.disp.add)
	return w
}

func (w *wired) unwire() {
	w.p.SetDisplay(nil)
	w.p.SetOutput(nil)
	w.p.SetPip(nil)
}

// runReply is how a run's call ended.
type runReply struct {
	f           proc.Frame
	err         error
	interrupted bool  // the time limit passed or ctx ended: the code was interrupted
	ctxErr      error // ctx's error, when it ended
	stuck       bool  // the code ignored the interrupt for Grace: kill was called
}

// call gives msg to p and waits for its answer. The run's time limit starts with its
// code: loading the packages it imports (and /data) has its own bound, RestoreTimeout,
// and the process says when it is done. At the limit, or when ctx ends, the code is
// interrupted; if it does not stop within Grace, kill is called and call returns once
// the process is gone.
func (c *Config) call(ctx context.Context, p *proc.Process, msg proc.RunReq, o *proc.Blobs, timeout time.Duration, kill func()) runReply {
	done := make(chan runReply, 1)
	// The call's own deadline is the backstop: past the load, the run's timeout, the
	// grace and time to save, the process is killed whatever it is doing.
	hard, cancelHard := context.WithTimeout(context.Background(), c.RestoreTimeout+timeout+c.Grace+time.Minute)
	defer cancelHard()
	started := make(chan struct{}, 1)
	p.SetStarted(func() {
		select {
		case started <- struct{}{}:
		default:
		}
	})
	defer p.SetStarted(nil)
	go func() {
		f, err := p.Call(hard, msg, o)
		done <- runReply{f: f, err: err}
	}()
	timer := time.NewTimer(c.RestoreTimeout)
	defer timer.Stop()
	var rep runReply
	var ctxErr error
	interrupted := false
wait:
	for {
		select {
		case rep = <-done:
		case <-started:
			// Once: a second word from the process (which user code can forge) never
			// extends the limit.
			timer.Reset(timeout)
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
		p.Interrupt()
		select {
		case rep = <-done:
		case <-time.After(c.Grace):
			kill()
			rep = <-done
			rep.stuck = true
		}
	}
	rep.interrupted, rep.ctxErr = interrupted, ctxErr
	return rep
}

// seenOutput keeps what a run streamed, each stream up to max bytes.
type seenOutput struct {
	mu             sync.Mutex
	max            int
	stdout, stderr strings.Builder
	outCut, errCut bool
}

func (s *seenOutput) add(stream, chunk string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, cut := &s.stdout, &s.outCut
	if stream == "stderr" {
		b, cut = &s.stderr, &s.errCut
	}
	if *cut {
		return // past the limit: nothing after the cut
	}
	if room := s.max - b.Len(); len(chunk) > room {
		chunk, *cut = sandchat.TruncateUTF8(chunk, room, ""), true
	}
	b.WriteString(chunk)
}

// text is what was seen, with the marker a run's own answer has when it was cut.
func (s *seenOutput) text() (stdout, stderr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stdout, stderr = s.stdout.String(), s.stderr.String()
	if s.outCut {
		stdout += truncatedAt(s.max)
	}
	if s.errCut {
		stderr += truncatedAt(s.max)
	}
	return stdout, stderr
}
