package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis layout, per board and period (the braces keep one board in one cluster slot):
//
//	{prefix}:{board:period}:z    sorted set; member "<16 hex of MaxInt64-reached µs>:<user>", score = score
//	{prefix}:{board:period}:u    hash user -> "score|version|updated µs|member"
//	{prefix}:{board:period}:n    hash user -> nick name
//	{prefix}:{board:period}:top  hash version, digest, updated (µs), body (one entry a line)
//
// Equal scores order by member, descending: the entry that reached the score first has
// the larger inverted time and ranks higher.

// upsertLua defines upsert(z, u, n, ...): the version-guarded write of one absolute
// entry state; it returns true when the user's nick name changed.
const upsertLua = `
local function upsert(z, u, n, user, score, version, updated, member, nick)
  local renamed = false
  if nick ~= '' and redis.call('HGET', n, user) ~= nick then
    redis.call('HSET', n, user, nick)
    renamed = true
  end
  local cur = redis.call('HGET', u, user)
  if cur then
    local _, cv, _, cm = string.match(cur, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
    if tonumber(cv) >= version then
      return renamed
    end
    if cm ~= member then
      redis.call('ZREM', z, cm)
    end
  end
  redis.call('ZADD', z, score, member)
  redis.call('HSET', u, user, score .. '|' .. version .. '|' .. updated .. '|' .. member)
  return renamed
end
`

// topLua defines refreshTop(z, u, n, top, topN, minVersion, now, force): it recomputes
// the cached top-N and bumps its version when it changed (or when force is set), and
// returns {changed, version, updated, body}.
const topLua = `
local function refreshTop(z, u, n, topKey, topN, minVersion, now, force)
  local top = redis.call('ZREVRANGE', z, 0, topN - 1, 'WITHSCORES')
  local digest = table.concat(top, ',')
  local meta = redis.call('HMGET', topKey, 'version', 'digest', 'updated', 'body')
  local curVersion = tonumber(meta[1]) or 0
  if meta[2] == digest and meta[4] and not force then
    return {0, curVersion, meta[3], meta[4]}
  end
  local lines = {}
  for k = 1, #top, 2 do
    local member, score = top[k], top[k+1]
    local user = string.sub(member, 18)
    local h = redis.call('HGET', u, user) or ''
    local _, _, upd = string.match(h, '^([^|]*)|([^|]*)|([^|]*)|')
    local nick = redis.call('HGET', n, user) or ''
    lines[#lines + 1] = user .. '\t' .. score .. '\t' .. (upd or '0') .. '\t' .. nick
  end
  local version = math.max(curVersion + 1, minVersion)
  local body = table.concat(lines, '\n')
  redis.call('HSET', topKey, 'version', version, 'digest', digest, 'updated', now, 'body', body)
  return {1, version, now, body}
end
`

// applyScript mirrors absolute entry states with a version guard (into the shadow keys
// too while a rebuild runs), then refreshes the cached top-N.
// KEYS: z, u, n, top, rebuild marker, shadow z, shadow u, shadow n.
// ARGV: topN, minVersion, now µs, count, then count × (user, score, version, updated µs, member, nick).
var applyScript = redis.NewScript(upsertLua + topLua + `
local topN, minVersion, now, count = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local rebuilding = redis.call('EXISTS', KEYS[5]) == 1
local renamed = false
local i = 5
for _ = 1, count do
  local user, score, version, updated, member, nick = ARGV[i], ARGV[i+1], tonumber(ARGV[i+2]), ARGV[i+3], ARGV[i+4], ARGV[i+5]
  i = i + 6
  if upsert(KEYS[1], KEYS[2], KEYS[3], user, score, version, updated, member, nick) then renamed = true end
  if rebuilding then upsert(KEYS[6], KEYS[7], KEYS[8], user, score, version, updated, member, nick) end
end
return refreshTop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], topN, minVersion, now, renamed)
`)

// loadScript writes entry states into the shadow keys of a rebuild (version-guarded, so
// newer states the projector wrote meanwhile win). KEYS: shadow z, u, n. ARGV as apply's
// entries, after the count.
var loadScript = redis.NewScript(upsertLua + `
local count = tonumber(ARGV[1])
local i = 2
for _ = 1, count do
  upsert(KEYS[1], KEYS[2], KEYS[3], ARGV[i], ARGV[i+1], tonumber(ARGV[i+2]), ARGV[i+3], ARGV[i+4], ARGV[i+5])
  i = i + 6
end
return count
`)

// swapScript replaces the live board with the shadow one in one step, ends the rebuild
// and refreshes the top with a version above every earlier one. It does nothing and
// returns {-1} unless the rebuild marker still holds the caller's token.
// KEYS: z, u, n, top, rebuild marker, shadow z, shadow u, shadow n. ARGV: topN, minVersion, now µs, token.
var swapScript = redis.NewScript(topLua + `
if redis.call('GET', KEYS[5]) ~= ARGV[4] then return {-1, 0} end
for k = 1, 3 do
  if redis.call('EXISTS', KEYS[k + 5]) == 1 then
    redis.call('RENAME', KEYS[k + 5], KEYS[k])
  else
    redis.call('DEL', KEYS[k])
  end
end
redis.call('DEL', KEYS[5])
return refreshTop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], true)
`)

// userScript returns {"score|version|updated|member", zero-based rank} or nil.
var userScript = redis.NewScript(`
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return false end
local member = string.match(h, '^[^|]*|[^|]*|[^|]*|(.*)$')
local rank = redis.call('ZREVRANK', KEYS[1], member)
if not rank then return false end
return {h, rank}
`)

// Entry is one ranked entry read from Redis.
type Entry struct {
	Rank      int64
	UserID    string
	Score     int64
	NickName  string
	UpdatedAt time.Time
}

// Top is a board's cached top-N.
type Top struct {
	Version   int64
	UpdatedAt time.Time
	Entries   []Entry
}

// Boards is the Redis side of the leaderboards.
type Boards struct {
	rdb    redis.UniversalClient
	prefix string
	topN   int
}

// NewBoards returns the Redis store; topN is the size of each board's cached top.
func NewBoards(rdb redis.UniversalClient, prefix string, topN int) *Boards {
	return &Boards{rdb: rdb, prefix: prefix, topN: topN}
}

// TopN is the size of the cached top.
func (b *Boards) TopN() int { return b.topN }

// keys returns z, u, n, top, the rebuild marker and the shadow z, u, n of a board.
func (b *Boards) keys(board, period string) []string {
	base := b.prefix + ":{" + board + ":" + period + "}:"
	return []string{base + "z", base + "u", base + "n", base + "top", base + "rebuild", base + "z~", base + "u~", base + "n~"}
}

// Member is the sorted-set member of a user's entry.
func Member(userID string, reachedAt time.Time) string {
	return fmt.Sprintf("%016x:%s", uint64(math.MaxInt64-reachedAt.UnixMicro()), userID)
}

// Apply mirrors the given absolute states of one board and period into Redis (older
// versions than what Redis holds are ignored), recomputes the cached top-N and reports
// whether it changed. minVersion lets the caller push the top version forward.
func (b *Boards) Apply(ctx context.Context, board, period string, states []EntryState, nicks map[string]string, minVersion int64) (Top, bool, error) {
	args := make([]any, 0, 4+6*len(states))
	args = append(args, b.topN, minVersion, time.Now().UnixMicro(), len(states))
	for _, s := range states {
		args = append(args, s.UserID, s.Score, s.Version, s.UpdatedAt.UnixMicro(), Member(s.UserID, s.ReachedAt), nicks[s.UserID])
	}
	res, err := applyScript.Run(ctx, b.rdb, b.keys(board, period), args...).Slice()
	if err != nil {
		return Top{}, false, redisErr("apply entries", err)
	}
	top, err := parseTop(res[1], res[2], res[3])
	if err != nil {
		return Top{}, false, err
	}
	return top, res[0].(int64) == 1, nil
}

// Top returns the cached top of a board, limited to limit entries. An empty board has
// version 0 and no entries.
func (b *Boards) Top(ctx context.Context, board, period string, limit int) (Top, error) {
	res, err := b.rdb.HMGet(ctx, b.keys(board, period)[3], "version", "updated", "body").Result()
	if err != nil {
		return Top{}, redisErr("read top", err)
	}
	if res[0] == nil {
		return Top{}, nil
	}
	top, err := parseTop(res[0], res[1], res[2])
	if err != nil {
		return Top{}, err
	}
	if limit >= 0 && len(top.Entries) > limit {
		top.Entries = top.Entries[:limit]
	}
	return top, nil
}

// User returns a user's entry with its 1-based rank, or ErrNotFound.
func (b *Boards) User(ctx context.Context, board, period, userID string) (Entry, error) {
	k := b.keys(board, period)
	res, err := userScript.Run(ctx, b.rdb, []string{k[0], k[1]}, userID).Slice()
	if errors.Is(err, redis.Nil) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, redisErr("read user", err)
	}
	parts := strings.SplitN(res[0].(string), "|", 4)
	if len(parts) != 4 {
		return Entry{}, fmt.Errorf("read user: malformed entry %q", res[0])
	}
	score, err1 := strconv.ParseInt(parts[0], 10, 64)
	updated, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Entry{}, fmt.Errorf("read user: %w", err)
	}
	return Entry{Rank: res[1].(int64) + 1, UserID: userID, Score: score, UpdatedAt: time.UnixMicro(updated).UTC()}, nil
}

// Ping checks that Redis answers.
func (b *Boards) Ping(ctx context.Context) error { return redisErr("ping", b.rdb.Ping(ctx).Err()) }

func parseTop(version, updated, body any) (Top, error) {
	v, err1 := strconv.ParseInt(fmt.Sprint(version), 10, 64)
	u, err2 := strconv.ParseInt(fmt.Sprint(updated), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Top{}, fmt.Errorf("parse top: %w", err)
	}
	top := Top{Version: v, UpdatedAt: time.UnixMicro(u).UTC()}
	s, _ := body.(string)
	if s == "" {
		return top, nil
	}
	for i, line := range strings.Split(s, "\n") {
		f := strings.SplitN(line, "\t", 4)
		if len(f) != 4 {
			return Top{}, fmt.Errorf("parse top: malformed line %q", line)
		}
		score, err1 := strconv.ParseFloat(f[1], 64)
		upd, err2 := strconv.ParseInt(f[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return Top{}, fmt.Errorf("parse top: %w", err)
		}
		top.Entries = append(top.Entries, Entry{Rank: int64(i + 1), UserID: f[0], Score: int64(score), UpdatedAt: time.UnixMicro(upd).UTC(), NickName: f[3]})
	}
	return top, nil
}

// redisErr marks every Redis failure but a script's own error as unavailability.
func redisErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !strings.HasPrefix(rerr.Error(), "LOADING") && !strings.HasPrefix(rerr.Error(), "BUSY") {
		return fmt.Errorf("%s: %w", op, err)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
}
