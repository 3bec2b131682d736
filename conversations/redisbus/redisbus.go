// Package redisbus carries conversation and user events between nodes over Redis
// pub/sub: whichever node commits an event publishes it, and every node with a socket
// that wants it delivers it.
package redisbus

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
)

// Bus publishes events and opens subscriptions under a key prefix, so deployments that
// share one Redis stay apart.
type Bus struct {
	rdb    redis.UniversalClient
	prefix string
}

// New returns a bus on rdb; prefix is SANDCHAT_REDIS_PREFIX.
func New(rdb redis.UniversalClient, prefix string) *Bus { return &Bus{rdb: rdb, prefix: prefix} }

var _ conversations.Publisher = (*Bus)(nil)

// ConversationChannel is where a conversation's events travel.
func (b *Bus) ConversationChannel(id int64) string {
	return b.prefix + "events:conv:" + strconv.FormatInt(id, 10)
}

// UserChannel is where events for every socket of one user travel.
func (b *Bus) UserChannel(id int64) string {
	return b.prefix + "events:user:" + strconv.FormatInt(id, 10)
}

func (b *Bus) PublishConversation(ctx context.Context, ev conversations.Event) error {
	return b.publish(ctx, b.ConversationChannel(ev.ConversationID), ev)
}

func (b *Bus) PublishUser(ctx context.Context, userID int64, ev conversations.Event) error {
	return b.publish(ctx, b.UserChannel(userID), ev)
}

func (b *Bus) publish(ctx context.Context, channel string, ev conversations.Event) error {
	payload, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return sandchat.RedisError(b.rdb.Publish(ctx, channel, payload).Err())
}

// PubSub opens a subscription with no channels yet; the caller adds and removes them as
// local sockets come and go.
func (b *Bus) PubSub(ctx context.Context) *redis.PubSub { return b.rdb.Subscribe(ctx) }

func (b *Bus) cancelChannel() string { return b.prefix + "turns:cancel" }

// PublishCancel asks every node to cancel a turn; the one that runs it does.
func (b *Bus) PublishCancel(ctx context.Context, turnID int64) error {
	return sandchat.RedisError(b.rdb.Publish(ctx, b.cancelChannel(), strconv.FormatInt(turnID, 10)).Err())
}

// ListenCancels calls fn with every cancelled turn id until ctx ends.
func (b *Bus) ListenCancels(ctx context.Context, fn func(turnID int64)) error {
	return b.listen(ctx, b.cancelChannel(), func(payload string) {
		if id, err := strconv.ParseInt(payload, 10, 64); err == nil {
			fn(id)
		}
	})
}

func (b *Bus) forgetChannel() string { return b.prefix + "sandbox:forget" }

// forget is a session deleted for good, and the node that deleted it.
type forget struct {
	Node string `json:"node"`
	Key  string `json:"key"`
}

// PublishForget tells every node that the session key was deleted for good by node
// (its conversation was deleted), so a node holding its live process closes it now
// rather than when it falls idle.
func (b *Bus) PublishForget(ctx context.Context, node, key string) error {
	payload, _ := json.Marshal(forget{Node: node, Key: key})
	return sandchat.RedisError(b.rdb.Publish(ctx, b.forgetChannel(), payload).Err())
}

// ListenForgets calls fn with every session deleted by a node other than node, until
// ctx ends.
func (b *Bus) ListenForgets(ctx context.Context, node string, fn func(key string)) error {
	return b.listen(ctx, b.forgetChannel(), func(payload string) {
		var f forget
		if json.Unmarshal([]byte(payload), &f) == nil && f.Key != "" && f.Node != node {
			fn(f.Key)
		}
	})
}

// listen calls fn with each message on channel until ctx ends.
func (b *Bus) listen(ctx context.Context, channel string, fn func(payload string)) error {
	ps := b.rdb.Subscribe(ctx, channel)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription is in place
		return err
	}
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			fn(m.Payload)
		}
	}
}
