package agents

import (
	"context"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/sandchat/sandchat"
)

// streamer turns many small chunks (tokens, output lines) into few events: it flushes
// when enough text waited or enough time passed (a timer sends what waits when the
// source pauses, so a model that stops mid-sentence is still seen up to there), and
// before anything else is said.
type streamer struct {
	t    *turnRun
	ctx  context.Context
	typ  string
	path []string
	base map[string]any

	mu     sync.Mutex // guards the fields below
	timer  *time.Timer
	stream string
	buf    strings.Builder
	last   time.Time
	err    error
	sent   int  // bytes emitted so far
	capped bool // the cap was reached and said so
}

const (
	flushBytes = 512
	flushEvery = 50 * time.Millisecond
	// streamCap bounds what one stream (a run's output, a model's answer) sends as
	// events: past it, clients get a marker and the full text over REST, so no frame
	// and no socket queue is flooded by one chatty program.
	streamCap    = 64 << 10
	eventTextMax = 16 << 10
)

func (t *turnRun) stream(ctx context.Context, typ string, path []string, base map[string]any) *streamer {
	return &streamer{t: t, ctx: ctx, typ: typ, path: path, base: base, last: time.Now()}
}

func (s *streamer) add(text string) { s.Add("", text) }

func (s *streamer) Add(stream, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if stream != s.stream && s.buf.Len() > 0 {
		s.flushLocked()
	}
	s.stream = stream
	if s.sent+s.buf.Len()+len(text) > streamCap {
		if s.capped {
			return
		}
		s.capped = true
		text = "\n…[live output truncated; the full output is in the result]…\n"
	}
	// One event carries at most eventTextMax: a program printing a megabyte at once
	// still makes small frames.
	for len(text) > 0 {
		n := len(sandchat.TruncateUTF8(text, eventTextMax-s.buf.Len(), ""))
		if n <= 0 && s.buf.Len() > 0 {
			s.flushLocked()
			continue
		} else if n <= 0 {
			n = min(len(text), eventTextMax) // not UTF-8 here: cut anywhere
		}
		s.buf.WriteString(text[:n])
		text = text[n:]
		if s.buf.Len() >= flushBytes || time.Since(s.last) >= flushEvery {
			s.flushLocked()
		}
	}
	if s.buf.Len() > 0 && s.timer == nil {
		s.timer = time.AfterFunc(flushEvery, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.timer = nil
			s.flushLocked()
		})
	}
}

func (s *streamer) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked()
	return s.err
}

func (s *streamer) flushLocked() {
	s.last = time.Now()
	if s.buf.Len() == 0 || s.err != nil {
		return
	}
	data := maps.Clone(s.base)
	if data == nil {
		data = map[string]any{}
	}
	data["text"] = s.buf.String()
	if s.stream != "" {
		data["stream"] = s.stream
	}
	s.sent += s.buf.Len()
	s.buf.Reset()
	s.err = s.t.emit(s.ctx, s.typ, s.path, data)
}
