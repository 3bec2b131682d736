package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
)

// MinRetention is the shortest retention a deployment may set: a conversation left
// for a day is one its user may still come back to the next morning.
const MinRetention = 24 * time.Hour

// Retention defaults: a pass deletes at most a small batch (each deletion reaches
// Redis and Postgres), passes follow each other after a pause while there is more to
// delete, and otherwise come every few minutes.
const (
	DefaultRetentionBatch = 20
	DefaultRetentionPause = time.Second
	DefaultRetentionEvery = 10 * time.Minute
)

// RetentionStore finds idle conversations and deletes them (conversations/pgstore).
type RetentionStore interface {
	IdleConversations(ctx context.Context, cutoff time.Time, limit int) ([]conversations.Idle, error)
	// DeleteIdleConversation deletes the conversation only if it is still idle.
	DeleteIdleConversation(ctx context.Context, id int64, cutoff time.Time) (bool, error)
	// TryRetentionLock takes the deployment's lock, held by one node at a time.
	TryRetentionLock(ctx context.Context) (unlock func(), ok bool, err error)
}

// RetentionConfig is how long conversations are kept and how the deletion is paced.
type RetentionConfig struct {
	// After is how long a conversation no one used is kept (SANDCHAT_RETENTION); at least
	// Min.
	After time.Duration
	// Min is the shortest After allowed: MinRetention unless lowered (tests).
	Min   time.Duration
	Batch int
	Pause time.Duration
	Every time.Duration
}

// Retention deletes conversations no one used for longer than the deployment keeps
// them, with all their data, the way their owner's delete does (their Python state
// first, on every node, then their messages, runs and files): in passes of a small
// batch, one node at a time, each deletion logged and counted.
type Retention struct {
	cfg     RetentionConfig
	store   RetentionStore
	python  Python
	log     *slog.Logger
	deleted prometheus.Counter
}

// NewRetention checks cfg and returns the sweeper; Run starts it.
func NewRetention(cfg RetentionConfig, store RetentionStore, python Python, log *slog.Logger) (*Retention, error) {
	if cfg.Min == 0 {
		cfg.Min = MinRetention
	}
	if cfg.After < cfg.Min {
		return nil, fmt.Errorf("retention %s is below its minimum, %s", cfg.After, cfg.Min)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultRetentionBatch
	}
	if cfg.Pause <= 0 {
		cfg.Pause = DefaultRetentionPause
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultRetentionEvery
	}
	return &Retention{cfg: cfg, store: store, python: python, log: log,
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandchat_retention_deleted_conversations_total",
			Help: "Conversations deleted by retention (SANDCHAT_RETENTION) for having been idle past it.",
		})}, nil
}

// Collectors are retention's metrics; main registers them with the server's registry.
func (r *Retention) Collectors() []prometheus.Collector { return []prometheus.Collector{r.deleted} }

// Run sweeps until ctx ends: a pass, then the next after a pause while passes find
// full batches, else after Every.
func (r *Retention) Run(ctx context.Context) {
	r.log.InfoContext(ctx, "retention on: conversations idle this long are deleted", "after", r.cfg.After)
	for {
		wait := r.cfg.Every
		found, _, err := r.Pass(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.log.WarnContext(ctx, "retention pass failed; the next one tries again", "err", err)
		case found == r.cfg.Batch:
			wait = r.cfg.Pause
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Pass deletes at most one batch of idle conversations, if no other node is sweeping,
// and says how many it found and deleted. A conversation someone came back to since it
// was found is kept (its Python state, forgotten meanwhile, starts anew).
func (r *Retention) Pass(ctx context.Context) (found, deleted int, err error) {
	unlock, ok, err := r.store.TryRetentionLock(ctx)
	if err != nil || !ok {
		return 0, 0, err
	}
	defer unlock()
	cutoff := time.Now().Add(-r.cfg.After)
	idle, err := r.store.IdleConversations(ctx, cutoff, r.cfg.Batch)
	if err != nil {
		return 0, 0, err
	}
	for _, c := range idle {
		owner := sandchat.WithUser(ctx, &sandchat.User{ID: c.OwnerID})
		if err := r.python.ForgetConversation(owner, c.ID); err != nil {
			return len(idle), deleted, fmt.Errorf("forget the Python state of conversation %d: %w", c.ID, err)
		}
		gone, err := r.store.DeleteIdleConversation(ctx, c.ID, cutoff)
		if err != nil {
			return len(idle), deleted, fmt.Errorf("delete conversation %d: %w", c.ID, err)
		}
		if !gone {
			r.log.InfoContext(ctx, "retention kept a conversation used again while it was being deleted", "conversation_id", c.ID)
			continue
		}
		deleted++
		r.deleted.Inc()
		r.log.InfoContext(ctx, "retention deleted an idle conversation", "conversation_id", c.ID, "owner_id", c.OwnerID, "idle_for_more_than", r.cfg.After)
	}
	return len(idle), deleted, nil
}
