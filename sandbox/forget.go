package sandbox

import (
	"context"

	"github.com/sandchat/sandchat"
)

// Forget deletes key's session for good, as when its conversation is deleted: its state
// in every tier at once (a run still going loses its lease and cannot save it back), then
// its live process on this node, once a run in it has stopped. Nothing of it stays; it
// is no reset of the session (the Observer is not told).
func (e *Engine) Forget(ctx context.Context, key string) error {
	if key == "" {
		return sandchat.Errorf(sandchat.EINVALID, "Session key is required.")
	}
	if err := e.st.Forget(ctx, key); err != nil {
		return err
	}
	// The live process holds the session's memory: reset takes the lease a run held (it
	// was just deleted, so that run stops) and closes the process.
	return e.reset(ctx, key)
}

// Drop closes key's live process on this node, if it holds one, without touching the
// store: another node deleted the session for good (Forget), so its state is gone from
// every tier already, and a run of it still going here has lost its lease. A node that
// never hears of the delete closes the process when it falls idle: its save is refused.
func (e *Engine) Drop(key string) {
	if s := e.sess.take(key); s != nil {
		s.Process().Close("the session was deleted")
	}
}
