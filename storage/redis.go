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
