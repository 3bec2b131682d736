package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// read takes frames from the process. Anything but the reply to the call in flight or
// an output chunk of a run is a protocol violation, and the process is killed.
func (p *proc) read(r *os.File) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		f, err := readFrame(br, p.maxFrame)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) && !errors.Is(err, io.EOF) && p.alive() {
				p.kill("protocol: " + err.Error())
			}
			return
		}
		var h replyHead
		if err := json.Unmarshal(f.raw, &h); err != nil {
			p.kill("protocol: unreadable frame")
			return
		}
		p.mu.Lock()
		want, fn, disp, pip, started := p.wantID, p.onOut, p.onDisp, p.onPip, p.onRun
		p.mu.Unlock()
		if h.ID == 0 && h.Op == "started" {
			if started != nil {
				started()
			}
			continue
		}
		if h.ID == 0 && h.Op == "pip" {
			// Answered off the reader: fetching takes a while, and output, displays and
			// the run's reply keep coming meanwhile.
			go func() {
				r := pipDone{Op: "pipDone", Seq: h.Seq, Wheels: []pipInstallMsg{}, Lock: []string{}, Error: "micropip.install is only available while code runs"}
				if pip != nil {
					r = pip(h.Seq, h.Req)
				}
				_ = p.send(0, r, nil)
			}()
			continue
		}
		if h.ID == 0 && h.Op == "display" {
			if disp != nil {
				if err := disp(h.Kind, h.Item); err != nil {
					p.kill("protocol: " + err.Error())
					return
				}
			}
			continue
		}
		if h.ID == 0 && h.Op == "out" {
			if h.Stream != "stdout" && h.Stream != "stderr" {
				p.kill("protocol: bad output stream")
				return
			}
			if fn != nil {
				fn(h.Stream, h.Chunk)
			}
			continue
		}
		if h.ID == 0 || h.ID != want {
			p.kill(fmt.Sprintf("protocol: reply %d while waiting for %d", h.ID, want))
			return
		}
		p.mu.Lock()
		p.wantID = 0
		p.mu.Unlock()
		p.reply <- f
	}
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// call sends a request and waits for its reply. A process that does not answer before
// ctx ends is killed: no wait on a session process is unbounded.
func (p *proc) call(ctx context.Context, msg any, o *blobs) (frame, error) {
	p.callMu.Lock()
	defer p.callMu.Unlock()
	if !p.alive() {
		return frame{}, errProcGone
	}
	p.thaw()
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	p.wantID = id
	p.mu.Unlock()
	if err := p.send(id, msg, o); err != nil {
		return frame{}, err
	}
	select {
	case f := <-p.reply:
		var r struct {
			OK    bool            `json:"ok"`
			Error json.RawMessage `json:"error"` // a refusal's reason; a run's Python error is an object
			Kind  string          `json:"kind"`
		}
		if err := json.Unmarshal(f.raw, &r); err != nil {
			p.kill("protocol: unreadable reply")
			return frame{}, errProcGone
		}
		if !r.OK {
			var msg string
			if json.Unmarshal(r.Error, &msg) != nil || msg == "" {
				// Not a plain reason: say what came, bounded, rather than nothing.
				msg = "the process refused the request: " + truncUTF8(string(r.Error), 300)
			}
			return f, &procError{msg: msg, kind: r.Kind}
		}
		return f, nil
	case <-p.done:
		return frame{}, errProcGone
	case <-ctx.Done():
		p.kill(fmt.Sprintf("the sandbox process did not answer in time (%v)", context.Cause(ctx)))
		<-p.done
		return frame{}, errProcGone
	}
}

// send writes one frame with the given id spliced into the message's JSON.
func (p *proc) send(id int64, msg any, o *blobs) error {
	js, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if len(js) < 2 || js[0] != '{' {
		return fmt.Errorf("request is not an object")
	}
	sep := ","
	if len(js) == 2 {
		sep = ""
	}
	js = append([]byte(`{"id":`+strconv.FormatInt(id, 10)+sep), js[1:]...)
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := writeFrame(p.req, json.RawMessage(js), o); err != nil {
		return fmt.Errorf("%w: %v", errProcGone, err)
	}
	return nil
}

// interrupt raises KeyboardInterrupt in the running code.
func (p *proc) interrupt() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = writeFrame(p.req, interruptReq{Op: "interrupt"}, nil)
}

// setDisplay routes a run's display frames; an error from fn kills the process.
func (p *proc) setDisplay(fn func(kind, item string) error) {
	p.mu.Lock()
	p.onDisp = fn
	p.mu.Unlock()
}

// setPip routes a run's install requests; nil refuses them.
// setStarted sets what is called when the run in flight starts its code.
func (p *proc) setStarted(fn func()) {
	p.mu.Lock()
	p.onRun = fn
	p.mu.Unlock()
}

func (p *proc) setPip(fn func(seq int64, req json.RawMessage) pipDone) {
	p.mu.Lock()
	p.onPip = fn
	p.mu.Unlock()
}

// setOutput routes a run's output chunks; nil stops them.
func (p *proc) setOutput(fn func(stream, chunk string)) {
	p.mu.Lock()
	p.onOut = fn
	p.mu.Unlock()
}
