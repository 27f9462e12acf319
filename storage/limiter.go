package storage

import (
	"context"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Limiter keeps the write limits in Redis: rate limits by go-redis/redis_rate (GCRA, one
// key per limited subject, its clock Redis's own) and action cooldowns (a lock per user
// and action, timed by the caller's clock). Errors wrap ErrUnavailable.
type Limiter struct {
	rdb    redis.UniversalClient
	rate   *redis_rate.Limiter
	prefix string
}

// NewLimiter returns the limiter on rdb; keys carry prefix. Rate-limit calls (one per
// player write) go out through pipe, in pipelines shared with other requests' commands.
func NewLimiter(rdb redis.UniversalClient, prefix string, pipe *Pipe) *Limiter {
	return &Limiter{rdb: rdb, rate: redis_rate.NewLimiter(pipedScripts{UniversalClient: rdb, pipe: pipe}), prefix: prefix}
}

// Allow spends one write of subject (for example "user:alice" or "board:daily:alice")
// against at most n writes per per: ok, or how long until the next write is allowed.
func (l *Limiter) Allow(ctx context.Context, subject string, n int, per time.Duration) (bool, time.Duration, error) {
	// redis_rate prefixes its keys with "rate:"; the braces keep each key on one slot.
	res, err := l.rate.Allow(ctx, l.prefix+":{"+subject+"}", redis_rate.Limit{Rate: n, Burst: n, Period: per})
	if err != nil {
		return false, 0, redisErr("rate limit", err)
	}
	return res.Allowed > 0, res.RetryAfter, nil
}

// refundScript gives one write back to a redis_rate (GCRA) budget: KEYS[1] holds its
// theoretical arrival time (s since 2017-01-01, Redis's clock), which Allow moved one
// emission interval (ARGV[1], s) ahead; it moves back, never before now (a full budget,
// which is no key at all).
var refundScript = redis.NewScript(`
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat then return 0 end
local t = redis.call('TIME')
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local back = tat - tonumber(ARGV[1])
if back <= now then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], back, 'EX', math.ceil(back - now))
end
return 1
`)

// Refund gives back one write Allow spent of subject's budget of n writes per per.
func (l *Limiter) Refund(ctx context.Context, subject string, n int, per time.Duration) error {
	// redis_rate's key for the subject (its "rate:" prefix and ours).
	key := "rate:" + l.prefix + ":{" + subject + "}"
	interval := strconv.FormatFloat(per.Seconds()/float64(n), 'g', -1, 64)
	if err := refundScript.Run(ctx, l.rdb, []string{key}, interval).Err(); err != nil {
		return redisErr("rate limit refund", err)
	}
	return nil
}

// cooldownScript takes an action's lock: KEYS[1] holds "until µs|event id". It answers the
// µs the lock still holds, 0 when taken, or -1 when the event holding it is retried (it
// passes; the lock stays the first attempt's). ARGV: now µs, until µs, event id, key
// lifetime ms.
var cooldownScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  local held, holder = string.match(v, '^(%d+)|(.*)$')
  local left = tonumber(held) - tonumber(ARGV[1])
  if left > 0 then
    if holder == ARGV[3] then return -1 end
    return left
  end
end
redis.call('SET', KEYS[1], ARGV[2] .. '|' .. ARGV[3], 'PX', ARGV[4])
return 0
`)

// releaseScript drops an action's lock if the event still holds it. KEYS[1]; ARGV: event id.
var releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^%d+|(.*)$') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
`)

func (l *Limiter) cooldownKey(board, userID, action string) string {
	return l.prefix + ":cooldown:{" + userID + "}:" + board + ":" + action
}

// Cooldown takes the lock of a user's action on a board for d from now, for eventID:
// taken, or how long the lock still holds (left > 0: refused). A retry with the event id
// that took the lock passes without taking it (taken false, left 0): giving it back is the
// first attempt's to do, not the retry's.
func (l *Limiter) Cooldown(ctx context.Context, board, userID, action, eventID string, d time.Duration, now time.Time) (taken bool, left time.Duration, err error) {
	until := now.Add(d)
	// The key outlives the lock a little; the lock's end is the stored time, on the caller's clock.
	us, err := cooldownScript.Run(ctx, l.rdb, []string{l.cooldownKey(board, userID, action)},
		now.UnixMicro(), until.UnixMicro(), eventID, (d + time.Minute).Milliseconds()).Int64()
	if err != nil {
		return false, 0, redisErr("cooldown", err)
	}
	return us == 0, time.Duration(max(us, 0)) * time.Microsecond, nil
}

// Release drops the lock eventID took (the write was not accepted after all).
func (l *Limiter) Release(ctx context.Context, board, userID, action, eventID string) error {
	err := releaseScript.Run(ctx, l.rdb, []string{l.cooldownKey(board, userID, action)}, eventID).Err()
	return redisErr("release cooldown "+strconv.Quote(action), err)
}
