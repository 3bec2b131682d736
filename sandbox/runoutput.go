package sandbox

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

// seenOutput keeps what a run streamed, each stream up to max bytes.
type seenOutput struct {
	mu             sync.Mutex // guards the fields below: the reader adds, the run's end reads
	max            int
	stdout, stderr strings.Builder
	outCut, errCut bool
}

// add keeps chunk of stream; last says the process cut the stream at its own limit
// with it.
func (s *seenOutput) add(stream, chunk string, last bool) {
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
	*cut = *cut || last
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
