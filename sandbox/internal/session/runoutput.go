package session

import (
	"strings"
	"sync"

	"github.com/sandchat/sandchat"
)

// Where a run's output and display items go as the process sends them: the caller's
// callbacks, and what the engine keeps to answer with (proc.Process.Run waits for the
// answer and interrupts the code at its limit).

// sinks is a run's end of what its process sends while the code runs.
type sinks struct {
	disp *displays   // display items, within their bounds
	seen *seenOutput // the output as it came: the answer when the process gives none
}

// seenOutput keeps what a run streamed, each stream up to max bytes, and where it went
// from one stream to the other.
type seenOutput struct {
	mu             sync.Mutex // guards the fields below: the reader adds, the run's end reads
	max            int
	stdout, stderr strings.Builder
	outCut, errCut bool
	last           string              // the stream written last
	switches       []sandchat.OutputAt // at most sandchat.MaxOutputOrder
}

// add keeps chunk of stream; last says the process cut the stream at its own limit
// with it.
func (s *seenOutput) add(stream, chunk string, last bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, cut := &s.stdout, &s.outCut
	if stream == "stderr" {
		b, cut = &s.stderr, &s.errCut
	} else {
		stream = "stdout"
	}
	if *cut {
		return // past the limit: nothing after the cut
	}
	if room := s.max - b.Len(); len(chunk) > room {
		chunk, *cut = sandchat.TruncateUTF8(chunk, room, ""), true
	}
	if chunk != "" {
		if s.last != "" && s.last != stream && len(s.switches) < sandchat.MaxOutputOrder {
			s.switches = append(s.switches, sandchat.OutputAt{Stdout: s.stdout.Len(), Stderr: s.stderr.Len()})
		}
		s.last = stream
		b.WriteString(chunk)
	}
	*cut = *cut || last
}

// order is the run's Order, for a stderr that has stderrBefore bytes of the engine's
// ahead of what the process wrote: they come first.
func (s *seenOutput) order(stderrBefore int) []sandchat.OutputAt {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sandchat.OutputAt
	if stderrBefore > 0 && s.stdout.Len() > 0 {
		out = append(out, sandchat.OutputAt{Stderr: stderrBefore})
	}
	for _, at := range s.switches {
		if len(out) == sandchat.MaxOutputOrder {
			break
		}
		out = append(out, sandchat.OutputAt{Stdout: at.Stdout, Stderr: at.Stderr + stderrBefore})
	}
	return out
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
