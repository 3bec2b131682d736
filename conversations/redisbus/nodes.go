package redisbus

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat"
)

// Nodes keeps one liveness key per node with a short TTL: a node renews its own, and
// any node can tell that another was killed or paused once its key expired, in seconds
// rather than after a turn's stale limit.
type Nodes struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewNodes returns the registry under prefix (SANDCHAT_REDIS_PREFIX).
func NewNodes(rdb redis.UniversalClient, prefix string) *Nodes {
	return &Nodes{rdb: rdb, prefix: prefix}
}

func (n *Nodes) key(id string) string { return n.prefix + "node:" + id }

// Beat renews nodeID's key for ttl.
func (n *Nodes) Beat(ctx context.Context, nodeID string, ttl time.Duration) error {
	return sandchat.RedisError(n.rdb.Set(ctx, n.key(nodeID), time.Now().UnixMilli(), ttl).Err())
}

// Alive reports which of ids renewed their key within its TTL.
func (n *Nodes) Alive(ctx context.Context, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := n.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Exists(ctx, n.key(id))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, sandchat.RedisError(err)
	}
	for i, id := range ids {
		out[id] = cmds[i].Val() > 0
	}
	return out, nil
}
