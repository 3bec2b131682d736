package sandbox

import (
	"strings"
	"testing"
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
