package sandbox

import (
	"context"
	"sort"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/session"
	"github.com/sandchat/sandchat/sandbox/internal/state"
)

// StateBytes is what the saved states of keys hold together in both tiers (heap, files,
// replay log), from the store's counters alone; zero for a session with none.
func (e *Engine) StateBytes(ctx context.Context, keys ...string) (int64, error) {
	return e.st.Bytes(ctx, keys...)
}

// Session describes the durable state of key; ENOTFOUND when there is none.
func (e *Engine) Session(ctx context.Context, key string) (SessionInfo, error) {
	st, err := e.st.Load(ctx, key, false)
	if err != nil {
		return SessionInfo{}, err
	}
	if st == nil {
		return SessionInfo{}, sandchat.Errorf(sandchat.ENOTFOUND, "This conversation has no Python session.")
	}
	info := SessionInfo{Version: st.Version, Packages: append([]string{}, st.Packages...), Mode: st.Mode, UpdatedAt: st.Updated, Files: []string{}}
	for p := range state.TreeOf(st.Files).Files {
		info.Files = append(info.Files, p)
	}
	sort.Strings(info.Files)
	if n, err := e.st.Bytes(ctx, key); err == nil {
		info.StateBytes = n
	}
	info.Live = e.sess.live(key, st.Version)
	return info, nil
}

// Reset forgets key's state; the next run starts a fresh interpreter. It waits for a
// run in progress to finish.
func (e *Engine) Reset(ctx context.Context, key string) error {
	if key == "" {
		return sandchat.Errorf(sandchat.EINVALID, "Session key is required.")
	}
	if err := e.reset(ctx, key); err != nil {
		return err
	}
	e.obs.SessionReset(ResetByUser)
	return nil
}

// reset forgets key's state and stops its live process, holding its lease.
func (e *Engine) reset(ctx context.Context, key string) error {
	return e.leases.with(ctx, key, func(context.Context, string) error {
		return session.Reset(ctx, e.env, key, e.sess.get(key), false)
	})
}
