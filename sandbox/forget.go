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
