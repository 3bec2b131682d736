package sandbox

import (
	"strings"
	"testing"
)

// TestSeenOutput: what a run streamed is kept per stream up to the output limit, cut on a
// character boundary and marked as a run's own answer is.
func TestSeenOutput(t *testing.T) {
	t.Parallel()
	s := &seenOutput{max: 10}
	s.add("stdout", "12345")
	s.add("stderr", "err\n")
	s.add("stdout", "6789é!") // é is two bytes: it does not fit whole
	s.add("stdout", "more")
	out, errs := s.text()
	if !strings.HasPrefix(out, "123456789\n[... output truncated at 10 bytes") || errs != "err\n" {
		t.Fatalf("stdout %q stderr %q", out, errs)
	}
}
