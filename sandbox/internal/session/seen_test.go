package session

import (
	"slices"
	"strings"
	"testing"

	"github.com/sandchat/sandchat"
)

// TestSeenOutput: what a run streamed is kept per stream up to the output limit, cut on a
// character boundary and marked as a run's own answer is; a stream the process cut at
// the same limit is marked too, and one that merely filled it is not.
func TestSeenOutput(t *testing.T) {
	t.Parallel()
	s := &seenOutput{max: 10}
	s.add("stdout", "12345", false)
	s.add("stderr", "err\n", false)
	s.add("stdout", "6789é!", false) // é is two bytes: it does not fit whole
	s.add("stdout", "more", false)
	out, errs := s.text()
	if !strings.HasPrefix(out, "123456789\n[... output truncated at 10 bytes") || errs != "err\n" {
		t.Fatalf("stdout %q stderr %q", out, errs)
	}

	s = &seenOutput{max: 10}
	s.add("stdout", "0123456789", true) // the process kept 10 bytes and dropped the rest
	s.add("stderr", "0123456789", false)
	out, errs = s.text()
	if out != "0123456789"+truncatedAt(10) || errs != "0123456789" {
		t.Fatalf("stdout %q stderr %q", out, errs)
	}
}

// TestOutputOrder: a run's Order is where its output went from one stream to the other,
// counted in the bytes kept; the engine's notes ahead of stderr come first; a program
// that alternates without end keeps the order of its first MaxOutputOrder switches.
func TestOutputOrder(t *testing.T) {
	t.Parallel()
	s := &seenOutput{max: 1 << 20}
	s.add("stdout", "o1\n", false)
	s.add("stdout", "o1b\n", false)
	s.add("stderr", "e1\n", false)
	s.add("stdout", "o2\n", false)
	want := []sandchat.OutputAt{{Stdout: 0, Stderr: 5}, {Stdout: 7, Stderr: 5}, {Stdout: 7, Stderr: 8}}
	if got := s.order(5); !slices.Equal(got, want) {
		t.Errorf("order with 5 bytes of notes ahead: %v, want %v", got, want)
	}
	if got, want := s.order(0), []sandchat.OutputAt{{Stdout: 7, Stderr: 0}, {Stdout: 7, Stderr: 3}}; !slices.Equal(got, want) {
		t.Errorf("order: %v, want %v", got, want)
	}
	only := &seenOutput{max: 1 << 20}
	only.add("stdout", "a", false)
	only.add("stdout", "b", false)
	if got := only.order(0); len(got) != 0 {
		t.Errorf("one stream: %v, want no order", got)
	}
	many := &seenOutput{max: 1 << 20}
	for range 3 * sandchat.MaxOutputOrder {
		many.add("stdout", "o", false)
		many.add("stderr", "e", false)
	}
	if got := many.order(3); len(got) != sandchat.MaxOutputOrder {
		t.Errorf("%d points kept, want %d", len(got), sandchat.MaxOutputOrder)
	}
}
