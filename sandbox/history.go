package sandbox

import "github.com/sandchat/sandchat/sandbox/internal/session"

// History is the record of sessions' runs kept outside the engine (the conversations'
// execution log in Postgres). When the store lost a session that did not expire, the
// engine rebuilds it by running again the successful runs History returns.
type History = session.History

// Option adds to what New builds.
type Option func(*Engine)

// WithHistory has the engine rebuild sessions its store lost from h.
func WithHistory(h History) Option { return func(e *Engine) { e.history = h } }
