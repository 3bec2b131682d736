package frontendapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat/conversations"
)

// Bus is the Redis side of the fan-out.
type Bus interface {
	PubSub(ctx context.Context) *redis.PubSub
	ConversationChannel(id int64) string
	UserChannel(id int64) string
}

// EventSource is the event log clients replay from and the check that a user may
// subscribe to a conversation.
type EventSource interface {
	FindConversationByID(ctx context.Context, id int64) (*conversations.Conversation, error)
	EventsSince(ctx context.Context, id, since int64, limit int) ([]conversations.Event, bool, error)
	LastSeq(ctx context.Context, id int64) (int64, error)
}

// Hub holds this node's WebSocket clients and one shared Redis subscription. A channel is
// subscribed when its first local client joins and unsubscribed after the last leaves.
// The dispatcher never blocks: it hands each message to each client's bounded queue.
type Hub struct {
	bus     Bus
	events  EventSource
	cfg     WSConfig
	log     *slog.Logger
	metrics *hubMetrics
	ps      *redis.PubSub
	done    chan struct{}
	// closing ends the linger of sockets dropped as slow (CloseAll).
	closing   chan struct{}
	closeOnce sync.Once

	subMu    sync.Mutex // serializes SUBSCRIBE/UNSUBSCRIBE with the map changes they follow
	mu       sync.RWMutex
	channels map[string]*channel
	clients  map[*client]struct{}
	running  sync.WaitGroup
}

type channel struct {
	convID  int64 // 0 for a user channel
	clients map[*client]struct{}
	ready   chan struct{} // closed when Redis confirms the subscription
	isReady bool
}

// NewHub starts the hub's dispatcher; Close stops it.
func NewHub(bus Bus, events EventSource, cfg WSConfig, log *slog.Logger) *Hub {
	h := &Hub{
		bus: bus, events: events, cfg: cfg.withDefaults(), log: log, metrics: newHubMetrics(),
		ps:       bus.PubSub(context.Background()),
		done:     make(chan struct{}),
		closing:  make(chan struct{}),
		channels: map[string]*channel{},
		clients:  map[*client]struct{}{},
	}
	go h.dispatch(h.ps.ChannelWithSubscriptions(redis.WithChannelSize(4096)))
	return h
}

func (h *Hub) dispatch(ch <-chan any) {
	defer close(h.done)
	for msg := range ch {
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				h.confirmed(m.Channel)
			}
		case *redis.Message:
			h.deliver(m.Channel, []byte(m.Payload))
		}
	}
}

// confirmed runs on every SUBSCRIBE confirmation, including the ones go-redis sends
// after it reconnects: messages published while the connection was down are lost, so
// every conversation client on the channel replays from its last seq.
func (h *Hub) confirmed(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.channels[name]
	if c == nil {
		return
	}
	if !c.isReady {
		c.isReady = true
		close(c.ready)
		return
	}
	for cl := range c.clients {
		cl.enqueue(outItem{op: opResync, conv: c.convID})
	}
}

func (h *Hub) deliver(name string, payload []byte) {
	var head struct {
		Type           string `json:"type"`
		ConversationID int64  `json:"conversation_id"`
		Seq            int64  `json:"seq"`
		Data           struct {
			ConversationID int64  `json:"conversation_id"`
			SessionID      int64  `json:"session_id"`
			TokenID        int64  `json:"token_id"`
			Reason         string `json:"reason"`
		} `json:"data"`
	}
	if err := json.Unmarshal(payload, &head); err != nil {
		h.metrics.dropped.Inc()
		h.log.Warn("undecodable pub/sub message", "channel", name, "err", err)
		return
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	c := h.channels[name]
	if c == nil {
		return
	}
	if head.Type == EventAccessRevoked && c.convID == 0 {
		for cl := range c.clients {
			cl.enqueue(outItem{op: opRevoke, conv: head.Data.ConversationID})
		}
		return
	}
	if head.Type == EventSessionEnded && c.convID == 0 {
		for cl := range c.clients {
			if cl.session != 0 && cl.session == head.Data.SessionID {
				cl.shutdown(closeSignedOut, "signed out")
			}
		}
		return
	}
	if head.Type == EventCredentialsRevoked && c.convID == 0 {
		for cl := range c.clients {
			if cl.signedInBy(head.Data.TokenID, head.Data.SessionID) {
				cl.shutdown(closeSignedOut, head.Data.Reason)
			}
		}
		return
	}
	for cl := range c.clients {
		cl.enqueue(outItem{op: opEvent, conv: head.ConversationID, seq: head.Seq, payload: payload})
	}
}

// join adds cl to a channel and returns once Redis has confirmed the subscription, so
// nothing published after join returns is missed.
func (h *Hub) join(ctx context.Context, cl *client, name string, convID int64) error {
	h.subMu.Lock()
	h.mu.Lock()
	c := h.channels[name]
	first := c == nil
	if first {
		c = &channel{convID: convID, clients: map[*client]struct{}{}, ready: make(chan struct{})}
		h.channels[name] = c
	}
	c.clients[cl] = struct{}{}
	h.mu.Unlock()
	var err error
	if first {
		err = h.ps.Subscribe(ctx, name)
	}
	h.subMu.Unlock()
	if err != nil {
		err = h.resubscribe(ctx, name, c.ready, err)
	}
	if err != nil {
		h.log.Warn("subscribe", "channel", name, "err", err)
		h.leave(cl, name)
		return err
	}
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		h.leave(cl, name)
		return ctx.Err()
	}
}

// subscribeRetries are the pauses before each new SUBSCRIBE after one fails. go-redis
// drops a pub/sub connection whose command fails and dials anew on the next one,
// subscribing again every channel it holds: a connection cut by the server (a failover,
// an output buffer over its limit) fails one SUBSCRIBE and a later one succeeds. A
// Redis that stays down fails them all, in about a second when it refuses connections.
var subscribeRetries = []time.Duration{50 * time.Millisecond, 250 * time.Millisecond, 750 * time.Millisecond}

// resubscribe sends SUBSCRIBE for name again after failed, until Redis takes it, ready
// closes (a reconnect subscribed it), the retries run out or ctx ends. The channel
// cannot go while its joining client is in it, so the pauses are taken without subMu:
// other sockets join and leave meanwhile.
func (h *Hub) resubscribe(ctx context.Context, name string, ready <-chan struct{}, failed error) error {
	err := failed
	for _, pause := range subscribeRetries {
		h.log.Info("subscribe failed, trying again", "channel", name, "in", pause, "err", err)
		select {
		case <-ready:
			return nil
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(pause):
		}
		h.subMu.Lock()
		err = h.ps.Subscribe(ctx, name)
		h.subMu.Unlock()
		if err == nil {
			return nil
		}
	}
	return err
}

func (h *Hub) leave(cl *client, name string) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	c := h.channels[name]
	if c == nil {
		h.mu.Unlock()
		return
	}
	delete(c.clients, cl)
	last := len(c.clients) == 0
	if last {
		delete(h.channels, name)
	}
	h.mu.Unlock()
	if last {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := h.ps.Unsubscribe(ctx, name); err != nil {
			h.log.Warn("unsubscribe", "channel", name, "err", err)
		}
	}
}

func (h *Hub) add(cl *client) {
	h.running.Add(1)
	h.mu.Lock()
	h.clients[cl] = struct{}{}
	h.mu.Unlock()
}

// remove takes cl out of the hub; the socket's goroutine ends (h.running) after.
func (h *Hub) remove(cl *client) {
	h.mu.Lock()
	delete(h.clients, cl)
	h.mu.Unlock()
}

// Wait returns when every socket has finished, or when ctx ends.
func (h *Hub) Wait(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		h.running.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// CloseAll tells every client to reconnect (to another node, during a deploy).
func (h *Hub) CloseAll() {
	h.closeOnce.Do(func() { close(h.closing) })
	h.mu.RLock()
	defer h.mu.RUnlock()
	for cl := range h.clients {
		cl.shutdown(closeRestart, "server restarting, reconnect")
	}
}

// Close ends the Redis subscription; call after CloseAll and the HTTP shutdown.
func (h *Hub) Close() error {
	err := h.ps.Close()
	<-h.done
	return err
}

// Clients is the number of open sockets on this node.
func (h *Hub) Clients() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.clients)
}
