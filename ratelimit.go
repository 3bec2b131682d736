package sandchat

import (
	"context"
	"sync"
	"time"
)

// RateLimit is where one rate limit stands for whoever was just counted against it (or
// refused by it): what an answer's RateLimit-* headers say.
type RateLimit struct {
	// Limit actions are allowed in any Window.
	Limit  int
	Window time.Duration
	// Remaining is how many more are allowed now.
	Remaining int
	// Reset is how long until the oldest action counted leaves the window, and one
	// more is allowed.
	Reset time.Duration
}

// RateReport collects what the limiters consulted on behalf of one request said: the
// HTTP layer puts one in the request's context, the limiters deep in the services note
// in it, and the answer carries the tightest.
type RateReport struct {
	mu       sync.Mutex
	tightest *RateLimit // the limit with the fewest remaining; nil until one is noted
}

type rateReportKey struct{}

// WithRateReport returns a context in which limiters note where they stand, and the
// report they note in.
func WithRateReport(ctx context.Context) (context.Context, *RateReport) {
	r := &RateReport{}
	return context.WithValue(ctx, rateReportKey{}, r), r
}

// NoteRateLimit tells the request in ctx, if it asked (WithRateReport), where a limit
// it was counted against stands.
func NoteRateLimit(ctx context.Context, l RateLimit) {
	r, _ := ctx.Value(rateReportKey{}).(*RateReport)
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tightest == nil || l.Remaining < r.tightest.Remaining {
		r.tightest = &l
	}
}

// Tightest is the noted limit closest to refusing, if any was noted.
func (r *RateReport) Tightest() (RateLimit, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tightest == nil {
		return RateLimit{}, false
	}
	return *r.tightest, true
}
