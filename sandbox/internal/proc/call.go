package proc

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/sandchat/sandchat"
)

// read takes frames from the process. Anything but the reply to the call in flight or
// an output chunk of a run is a protocol violation, and the process is killed.
func (p *Process) read(r *os.File) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 1<<20)
	broken := func(err error) {
		// The process's end (EOF, also in the middle of a frame) is wait's to explain:
		// the memory cap's kill, an exit status. Anything else is a broken frame.
		if !errors.Is(err, os.ErrClosed) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && p.Alive() {
			p.Kill("protocol: " + err.Error())
		}
	}
	for {
		js, bin, err := readHead(br, p.limitNow)
		if err != nil {
			broken(err)
			return
		}
		var h replyHead
		if err := json.Unmarshal(js, &h); err != nil {
			p.Kill("protocol: unreadable frame")
			return
		}
		p.mu.Lock()
		want, fn, disp, pip, started, sink := p.wantID, p.onOut, p.onDisp, p.onPip, p.onRun, p.sink
		p.mu.Unlock()
		f := Frame{JSON: js}
		if h.ID != 0 && h.ID == want && sink != nil {
			// The awaited reply's binary section goes to the call as it arrives; what
			// the sink leaves of it is read past, never held.
			lr := &io.LimitedReader{R: br, N: int64(bin)}
			_ = sink(js, lr)
			if _, err := io.Copy(io.Discard, lr); err != nil || lr.N > 0 {
				broken(unexpected(cmp.Or(err, io.EOF)))
				return
			}
		} else if f.Bin, err = readBody(br, bin); err != nil {
			broken(err)
			return
		}
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
				r := PipDone{Op: "pipDone", Seq: h.Seq, Wheels: []PipWheel{}, Lock: []string{}, Error: "micropip.install is only available while code runs"}
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
					p.Kill("protocol: " + err.Error())
					return
				}
			}
			continue
		}
		if h.ID == 0 && h.Op == "out" {
			if h.Stream != "stdout" && h.Stream != "stderr" {
				p.Kill("protocol: bad output stream")
				return
			}
			if fn != nil {
				fn(h.Stream, h.Chunk, h.Truncated)
			}
			continue
		}
		if h.ID == 0 || h.ID != want {
			p.Kill(fmt.Sprintf("protocol: reply %d while waiting for %d", h.ID, want))
			return
		}
		p.mu.Lock()
		p.wantID = 0
		p.mu.Unlock()
		p.reply <- f
	}
}

// Alive tells whether the process still runs.
func (p *Process) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Call sends a request and waits for its reply. A process that does not answer before
// ctx ends is killed: no wait on a session process is unbounded.
func (p *Process) Call(ctx context.Context, msg any, o *Blobs) (Frame, error) {
	return p.call(ctx, msg, o, nil, nil)
}

// CallStream is Call with the reply's binary section handed to sink as it arrives,
// never held (the Frame comes back with its JSON only): what the process claims to send
// costs what sink keeps of it. sink runs before CallStream returns, and its outcome is
// its own to keep; on an error of CallStream it may not have run, or still run.
func (p *Process) CallStream(ctx context.Context, msg any, o *Blobs, sink func(js json.RawMessage, bin io.Reader) error) (Frame, error) {
	return p.call(ctx, msg, o, nil, sink)
}

// call is Call, and tells sent once the request is written.
func (p *Process) call(ctx context.Context, msg any, o *Blobs, sent func(), sink func(json.RawMessage, io.Reader) error) (Frame, error) {
	p.callMu.Lock()
	defer p.callMu.Unlock()
	if !p.Alive() {
		return Frame{}, ErrGone
	}
	p.thaw()
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	p.wantID = id
	p.frameLimit = replyLimit(msg, p.maxFrame)
	p.sink = sink
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.frameLimit, p.sink = 0, nil
		p.mu.Unlock()
	}()
	if err := p.send(id, msg, o); err != nil {
		return Frame{}, err
	}
	if sent != nil {
		sent()
	}
	select {
	case f := <-p.reply:
		var r struct {
			OK    bool            `json:"ok"`
			Error json.RawMessage `json:"error"` // a refusal's reason; a run's Python error is an object
			Kind  string          `json:"kind"`
		}
		if err := json.Unmarshal(f.JSON, &r); err != nil {
			p.Kill("protocol: unreadable reply")
			return Frame{}, ErrGone
		}
		if !r.OK {
			var msg string
			if json.Unmarshal(r.Error, &msg) != nil || msg == "" {
				// Not a plain reason: say what came, bounded, rather than nothing.
				msg = "the process refused the request: " + sandchat.TruncateUTF8(string(r.Error), 300, "")
			}
			return f, &Error{Msg: msg, Kind: r.Kind}
		}
		return f, nil
	case <-p.done:
		return Frame{}, ErrGone
	case <-ctx.Done():
		p.Kill(fmt.Sprintf("the sandbox process did not answer in time (%v)", context.Cause(ctx)))
		<-p.done
		return Frame{}, ErrGone
	}
}

// limitNow is the largest frame the process may send now.
func (p *Process) limitNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frameLimit > 0 {
		return p.frameLimit
	}
	return p.maxFrame
}

// replyLimit is the largest frame a process may send while msg waits for its reply:
// for a checkpoint, what a delta within its MaxBytes takes (each block's index, the
// snapshot's header and the JSON beside it), so a forged one is refused from its length,
// before any of it is buffered; else the process's limit.
func replyLimit(msg any, maxFrame int) int {
	if c, ok := msg.(CheckpointReq); ok && c.MaxBytes > 0 {
		return int(min(c.MaxBytes+c.MaxBytes/32+checkpointSlack, int64(maxFrame)))
	}
	return maxFrame
}

// checkpointSlack is what a checkpoint reply holds besides its delta's blocks: the
// snapshot's header and the reply's JSON.
const checkpointSlack = 8 << 20

// send writes one frame with the given id spliced into the message's JSON.
func (p *Process) send(id int64, msg any, o *Blobs) error {
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
	if err := WriteFrame(p.req, json.RawMessage(js), o); err != nil {
		return fmt.Errorf("%w: %v", ErrGone, err)
	}
	return nil
}

// interrupt raises KeyboardInterrupt in the running code.
func (p *Process) interrupt() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = WriteFrame(p.req, interruptReq{Op: "interrupt"}, nil)
}

// setHooks routes what the process sends during a run (output chunks, display frames,
// install requests) to h, and says when the run starts its code; the zero values
// stop them. A display hook's error kills the process.
func (p *Process) setHooks(h RunHooks, started func()) {
	p.mu.Lock()
	p.onOut, p.onDisp, p.onPip, p.onRun = h.Output, h.Display, h.Pip, started
	p.mu.Unlock()
}
