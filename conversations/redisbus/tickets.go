package redisbus

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat"
)

// ticketPrefix makes tickets recognisable, as tokens (sct_) and sessions (scs_) are.
const ticketPrefix = "sctk_"

// Tickets keeps tickets in Redis, each under the hash of its secret with its time to
// live: any node redeems what another issued, the first GETDEL spends it, and Redis
// forgets it when it expires.
type Tickets struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewTickets returns the ticket store under prefix (SANDCHAT_REDIS_PREFIX).
func NewTickets(rdb redis.UniversalClient, prefix string) *Tickets {
	return &Tickets{rdb: rdb, prefix: prefix}
}

var _ sandchat.TicketService = (*Tickets)(nil)

func (t *Tickets) key(secret string) string {
	return t.prefix + "ticket:" + hex.EncodeToString(sandchat.SecretHash(secret))
}

// badTicket is the one answer for a ticket that does not work.
func badTicket() error {
	return sandchat.Errorf(sandchat.EUNAUTHORIZED, "This ticket does not work: a ticket works once, within %d seconds of being made, "+
		"for what it was made for. Ask for a new one (POST /api/v1/tickets).", int(sandchat.TicketTTL/time.Second))
}

// IssueTicket stores what the ticket stands for under its hash.
func (t *Tickets) IssueTicket(ctx context.Context, tk sandchat.Ticket, ttl time.Duration) (string, time.Time, error) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // never fails (crypto/rand)
	secret := ticketPrefix + base64.RawURLEncoding.EncodeToString(raw)
	value, err := json.Marshal(tk)
	if err != nil {
		return "", time.Time{}, err
	}
	expires := time.Now().Add(ttl)
	if err := t.rdb.Set(ctx, t.key(secret), value, ttl).Err(); err != nil {
		return "", time.Time{}, sandchat.RedisError(err)
	}
	return secret, expires, nil
}

// RedeemTicket spends the ticket: of two requests that bring it, one gets it.
func (t *Tickets) RedeemTicket(ctx context.Context, secret string) (*sandchat.Ticket, error) {
	if !strings.HasPrefix(secret, ticketPrefix) || len(secret) != len(ticketPrefix)+43 {
		return nil, badTicket()
	}
	value, err := t.rdb.GetDel(ctx, t.key(secret)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, badTicket()
	}
	if err != nil {
		return nil, sandchat.RedisError(err)
	}
	var tk sandchat.Ticket
	if err := json.Unmarshal(value, &tk); err != nil {
		return nil, err
	}
	return &tk, nil
}
