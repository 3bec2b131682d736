package redisbus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat"
)

// rateWindow is the span every limit counts over: "N per minute" means at most N in any
// minute, not N in each minute of the clock (which lets 2N through across the turn of
// one).
const rateWindow = time.Minute

// Limiter counts each user's actions over a sliding minute in Redis, so the limit holds
// across nodes. A limit of zero or less means unlimited.
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

// slidingLog keeps, per key, the times of the actions counted within the window (a
// sorted set scored by milliseconds): the ones older than the window go, and a new one
// is counted only while fewer than the limit remain. It answers whether it was counted,
// how many remain, and when the oldest still counted was. KEYS[1] the log; ARGV: now
// (ms), the window (ms), the limit, a member unique to this action.
var slidingLog = redis.NewScript(`
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
local counted = 0
if n < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], window)
  n = n + 1
  counted = 1
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2] or now
return {counted, limit - n, tostring(oldest)}
`)

// Allow counts one action of the user in ctx, or refuses it with EBUSY and the seconds
// until one more is allowed.
func (l *Limiter) Allow(ctx context.Context, action string) error {
	uid := sandchat.UserIDFromContext(ctx)
	if uid == 0 {
		return nil
	}
	return l.AllowKey(ctx, action, strconv.FormatInt(uid, 10))
}

// AllowKey counts one action of whoever key names (a client address, for actions
// taken before anyone is signed in), or refuses it as Allow does. Either way the
// request in ctx is told where the limit stands (sandchat.NoteRateLimit).
func (l *Limiter) AllowKey(ctx context.Context, action, who string) error {
	limit := l.limits[action]
	if limit <= 0 || who == "" {
		return nil
	}
	now := l.now().UnixMilli()
	var unique [8]byte
	_, _ = rand.Read(unique[:])
	key := l.prefix + "rate:" + action + ":" + who
	res, err := slidingLog.Run(ctx, l.rdb, []string{key}, now, rateWindow.Milliseconds(), limit,
		strconv.FormatInt(now, 10)+"-"+hex.EncodeToString(unique[:])).Slice()
	if err != nil {
		return sandchat.RedisError(err)
	}
	counted, _ := res[0].(int64)
	remaining, _ := res[1].(int64)
	first, _ := res[2].(string)
	oldest, _ := strconv.ParseFloat(first, 64)
	reset := time.Duration(int64(oldest)+rateWindow.Milliseconds()-now) * time.Millisecond
	sandchat.NoteRateLimit(ctx, sandchat.RateLimit{Limit: limit, Window: rateWindow, Remaining: int(max(remaining, 0)), Reset: max(reset, 0)})
	if counted == 1 {
		return nil
	}
	l.refused.WithLabelValues(action).Inc()
	retry := int(max((reset+time.Second-1)/time.Second, 1))
	return &sandchat.Error{Code: sandchat.EBUSY, RetryAfter: retry,
		Message: "Rate limit: at most " + strconv.Itoa(limit) + " " + action + " per minute; retry in " + strconv.Itoa(retry) + " s."}
}
