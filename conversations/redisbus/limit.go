package redisbus

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat"
)

// Limiter counts each user's actions per minute in Redis, so the limit holds across
// nodes. A limit of zero or less means unlimited.
type Limiter struct {
	rdb    redis.UniversalClient
	prefix string
	limits map[string]int
	now    func() time.Time
	// refused counts refusals by action (the names in limits, a bounded set).
	refused *prometheus.CounterVec
}

// NewLimiter returns a limiter with per-minute limits by action name.
func NewLimiter(rdb redis.UniversalClient, prefix string, perMinute map[string]int) *Limiter {
	return &Limiter{rdb: rdb, prefix: prefix, limits: perMinute, now: time.Now,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandchat_rate_limited_total", Help: "Actions refused by a per-minute rate limit (429), by action: messages, executions, logins.",
		}, []string{"action"})}
}

// Collectors are the limiter's metrics; main registers them.
func (l *Limiter) Collectors() []prometheus.Collector { return []prometheus.Collector{l.refused} }

// Allow counts one action of the user in ctx, or refuses it with EBUSY and the seconds
// until the window turns.
func (l *Limiter) Allow(ctx context.Context, action string) error {
	uid := sandchat.UserIDFromContext(ctx)
	if uid == 0 {
		return nil
	}
	return l.AllowKey(ctx, action, strconv.FormatInt(uid, 10))
}

// AllowKey counts one action of whoever key names (a client address, for actions
// taken before anyone is signed in), or refuses it as Allow does.
func (l *Limiter) AllowKey(ctx context.Context, action, who string) error {
	limit := l.limits[action]
	if limit <= 0 || who == "" {
		return nil
	}
	now := l.now()
	window := now.Unix() / 60
	key := l.prefix + "rate:" + action + ":" + who + ":" + strconv.FormatInt(window, 10)
	pipe := l.rdb.TxPipeline()
	incr := pipe.Incr(ctx, key)
	pipe.Expire(ctx, key, 2*time.Minute)
	if _, err := pipe.Exec(ctx); err != nil {
		return sandchat.RedisError(err)
	}
	if n := incr.Val(); n > int64(limit) {
		l.refused.WithLabelValues(action).Inc()
		retry := int((window+1)*60 - now.Unix())
		if retry < 1 {
			retry = 1
		}
		return &sandchat.Error{Code: sandchat.EBUSY, RetryAfter: retry,
			Message: "Rate limit: at most " + strconv.Itoa(limit) + " " + action + " per minute; retry in " + strconv.Itoa(retry) + " s."}
	}
	return nil
}
