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
	rdb     redis.UniversalClient
	rate    *redis_rate.Limiter
	scripts *pipelinedScripts
	prefix  string
}

// NewLimiter returns the limiter on rdb; keys carry prefix. Concurrent rate-limit calls
// share Redis round trips (each pipeline bounded by timeout); Close stops that.
func NewLimiter(rdb redis.UniversalClient, prefix string, timeout time.Duration) *Limiter {
	scripts := newPipelinedScripts(rdb, timeout)
	return &Limiter{rdb: rdb, rate: redis_rate.NewLimiter(scripts), scripts: scripts, prefix: prefix}
}

// Close stops the limiter once its queued calls are done.
func (l *Limiter) Close() { l.scripts.batcher.Close() }

// pipelinedScripts is the Redis client redis_rate runs its script on: concurrent EVALSHA
// calls (one per player write) go out together in one pipeline instead of a round trip
// each; everything else (the EVAL fallback when Redis lost the script) goes straight to
// the client. redis_rate's script and its reading of the answer stay the library's.
type pipelinedScripts struct {
	redis.UniversalClient
	batcher *Batcher[scriptCall, any]
}

type scriptCall struct {
	sha  string
	keys []string
	args []any
}

func newPipelinedScripts(rdb redis.UniversalClient, timeout time.Duration) *pipelinedScripts {
	return &pipelinedScripts{UniversalClient: rdb, batcher: NewBatcher(2, 256, func(calls []scriptCall) []Result[any] {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmds := make([]*redis.Cmd, len(calls))
		// Each command keeps its own answer or error (NOSCRIPT included), whatever
		// Pipelined returns.
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range calls {
				cmds[i] = p.EvalSha(ctx, c.sha, c.keys, c.args...)
			}
			return nil
		})
		out := make([]Result[any], len(calls))
		for i, cmd := range cmds {
			out[i].Value, out[i].Err = cmd.Result()
		}
		return out
	})}
}

// EvalSha runs the call in the next pipeline and answers as the client would.
func (p *pipelinedScripts) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, "evalsha", sha, len(keys))
	v, err := p.batcher.Do(ctx, scriptCall{sha: sha, keys: keys, args: args})
	if err != nil {
		cmd.SetErr(err)
	} else {
		cmd.SetVal(v)
	}
	return cmd
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

// cooldownScript takes an action's lock: KEYS[1] holds "until µs|event id". It answers the
// µs the lock still holds, or 0 when taken (a retry of the event holding it passes).
// ARGV: now µs, until µs, event id, key lifetime ms.
var cooldownScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  local held, holder = string.match(v, '^(%d+)|(.*)$')
  local left = tonumber(held) - tonumber(ARGV[1])
  if left > 0 then
    if holder == ARGV[3] then return 0 end
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

// Cooldown takes the lock of a user's action on a board for d from now, for eventID: ok,
// or how long the lock still holds. A retry with the event id that took the lock passes.
func (l *Limiter) Cooldown(ctx context.Context, board, userID, action, eventID string, d time.Duration, now time.Time) (bool, time.Duration, error) {
	until := now.Add(d)
	// The key outlives the lock a little; the lock's end is the stored time, on the caller's clock.
	left, err := cooldownScript.Run(ctx, l.rdb, []string{l.cooldownKey(board, userID, action)},
		now.UnixMicro(), until.UnixMicro(), eventID, (d + time.Minute).Milliseconds()).Int64()
	if err != nil {
		return false, 0, redisErr("cooldown", err)
	}
	return left == 0, time.Duration(left) * time.Microsecond, nil
}

// Release drops the lock eventID took (the write was not accepted after all).
func (l *Limiter) Release(ctx context.Context, board, userID, action, eventID string) error {
	err := releaseScript.Run(ctx, l.rdb, []string{l.cooldownKey(board, userID, action)}, eventID).Err()
	return redisErr("release cooldown "+strconv.Quote(action), err)
}
