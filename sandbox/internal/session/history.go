package session

import (
	"context"
	"time"

	"github.com/sandchat/sandchat"
)

// replayable is the code of the successful runs since the session last expired (no run
// for longer than ttl), oldest first; nothing when it is expired now.
func replayable(runs []sandchat.SessionRun, ttl time.Duration, now time.Time) []string {
	if len(runs) == 0 {
		return nil
	}
	from := 0
	if ttl > 0 {
		if now.Sub(runs[len(runs)-1].FinishedAt) > ttl {
			return nil
		}
		for i := len(runs) - 1; i > 0; i-- {
			if runs[i].StartedAt.Sub(runs[i-1].FinishedAt) > ttl {
				from = i
				break
			}
		}
	}
	var code []string
	for _, r := range runs[from:] {
		if r.Status == StatusSuccess {
			code = append(code, r.Code)
		}
	}
	return code
}

// lostCells is the code to replay for a session the store has no state of and never
// saw expire; nil when there is no history or nothing to replay.
func lostCells(ctx context.Context, h History, key string, ttl time.Duration) ([]string, error) {
	if h == nil {
		return nil, nil
	}
	runs, err := h.SessionRuns(ctx, key)
	if err != nil {
		return nil, err
	}
	return replayable(runs, ttl, time.Now()), nil
}
