package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// page reads board entries in user id order after afterUser, with nick names.
func (r *Ranks) page(ctx context.Context, board, period, afterUser string, limit int, random bool) ([]EntryState, map[string]string, error) {
	q := `SELECT e.board_id, e.period, e.user_id, e.score, e.version, e.reached_at, e.updated_at, coalesce(u.nick_name, '')
		FROM board_entries e LEFT JOIN users u ON u.user_id = e.user_id
		WHERE e.board_id = $1 AND e.period = $2 AND e.user_id > $3 ORDER BY e.user_id LIMIT $4`
	if random {
		q = `SELECT e.board_id, e.period, e.user_id, e.score, e.version, e.reached_at, e.updated_at, coalesce(u.nick_name, '')
		FROM board_entries e LEFT JOIN users u ON u.user_id = e.user_id
		WHERE e.board_id = $1 AND e.period = $2 AND e.user_id > $3 ORDER BY random() LIMIT $4`
	}
	rows, err := r.pool.Query(ctx, q, board, period, afterUser, limit)
	if err != nil {
		return nil, nil, unavailable("read board entries", err)
	}
	nicks := map[string]string{}
	states, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (EntryState, error) {
		var s EntryState
		var nick string
		err := row.Scan(&s.Board, &s.Period, &s.UserID, &s.Score, &s.Version, &s.ReachedAt, &s.UpdatedAt, &nick)
		if nick != "" {
			nicks[s.UserID] = nick
		}
		return s, err
	})
	return states, nicks, unavailable("read board entries", err)
}

// count returns how many entries a board holds in PostgreSQL.
func (r *Ranks) count(ctx context.Context, board, period string) (int64, error) {
	var n int64
	err := r.pool.QueryRow(ctx, `SELECT count(*) FROM board_entries WHERE board_id = $1 AND period = $2`, board, period).Scan(&n)
	return n, unavailable("count board entries", err)
}

// maxSeq is the newest history sequence number: top versions after a rebuild start above
// it, so they stay above the versions clients have seen even when Redis lost them.
func (r *Ranks) maxSeq(ctx context.Context) (int64, error) {
	var n int64
	err := r.pool.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM score_history`).Scan(&n)
	return n, unavailable("max history sequence", err)
}

// RebuildResult says what a rebuild loaded.
type RebuildResult struct {
	Board    string        `json:"board"`
	Period   string        `json:"period"`
	Entries  int64         `json:"entries"`
	Version  int64         `json:"version"`
	Duration time.Duration `json:"-"`
}

// ErrRebuildRunning is returned when another rebuild of the same board and period holds
// the rebuild lock.
var ErrRebuildRunning = errors.New("a rebuild of this board is already running")

// rebuildLockTTL bounds how long a crashed rebuild keeps the lock (and keeps the projector
// writing the shadow keys); a running rebuild refreshes it every third of that.
const rebuildLockTTL = 60 * time.Second

// refreshLockScript extends the rebuild lock while its owner still holds it.
var refreshLockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)

// Rebuild rebuilds a board's Redis state from PostgreSQL into shadow keys while the
// projector keeps writing (it writes to both while the rebuild marker exists, with the
// version guard), then swaps the shadow in atomically. Readers never see a half-built
// board and no update made during the rebuild is lost. The marker is also the rebuild's
// lock: a second rebuild of the same board and period gets ErrRebuildRunning, and only
// the holder may swap its shadow in.
func (b *Boards) Rebuild(ctx context.Context, src *Ranks, board, period string) (RebuildResult, error) {
	start := time.Now()
	k := b.keys(board, period)
	token := strconv.FormatInt(start.UnixNano(), 36) + "-" + strconv.FormatUint(rand.Uint64(), 36)
	ok, err := b.rdb.SetNX(ctx, k[4], token, rebuildLockTTL).Result()
	if err != nil {
		return RebuildResult{}, redisErr("rebuild: lock", err)
	}
	if !ok {
		return RebuildResult{}, ErrRebuildRunning
	}
	lockCtx, stopRefresh := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRefresh()
	go b.holdLock(lockCtx, k[4], token)

	if err := b.rdb.Del(ctx, k[5], k[6], k[7]).Err(); err != nil {
		return RebuildResult{}, redisErr("rebuild: clear shadow", err)
	}
	res := RebuildResult{Board: board, Period: period}
	after := ""
	for {
		states, nicks, err := src.page(ctx, board, period, after, 2000, false)
		if err != nil {
			return RebuildResult{}, err
		}
		if len(states) == 0 {
			break
		}
		args := make([]any, 0, 1+6*len(states))
		args = append(args, len(states))
		for _, s := range states {
			args = append(args, s.UserID, s.Score, s.Version, s.UpdatedAt.UnixMicro(), Member(s.UserID, s.ReachedAt), nicks[s.UserID])
		}
		if err := loadScript.Run(ctx, b.rdb, k[5:8], args...).Err(); err != nil {
			return RebuildResult{}, redisErr("rebuild: load", err)
		}
		res.Entries += int64(len(states))
		after = states[len(states)-1].UserID
	}
	seq, err := src.maxSeq(ctx)
	if err != nil {
		return RebuildResult{}, err
	}
	// Strictly above the newest event's seq (the top an apply writes has a version of at
	// least its batch's seq), so the rebuilt top reads as newer than the one that event
	// produced even when Redis lost the top and its version.
	out, err := swapScript.Run(ctx, b.rdb, k, b.topN, seq+1, time.Now().UnixMicro(), token).Slice()
	if err != nil {
		return RebuildResult{}, redisErr("rebuild: swap", err)
	}
	if out[0].(int64) == -1 {
		return RebuildResult{}, fmt.Errorf("rebuild: lost the rebuild lock before the swap; nothing was swapped in")
	}
	res.Version, res.Duration = out[1].(int64), time.Since(start)
	return res, nil
}

// holdLock refreshes the rebuild lock until ctx ends.
func (b *Boards) holdLock(ctx context.Context, key, token string) {
	t := time.NewTicker(rebuildLockTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = refreshLockScript.Run(ctx, b.rdb, []string{key}, token, rebuildLockTTL.Milliseconds()).Err()
		}
	}
}

// Difference is one entry on which Redis and PostgreSQL disagree.
type Difference struct {
	UserID   string `json:"user_id"`
	Postgres string `json:"postgres"` // "score/version", or "" when missing
	Redis    string `json:"redis"`
}

// ConsistencyReport compares a board in Redis with PostgreSQL.
type ConsistencyReport struct {
	Board           string       `json:"board"`
	Period          string       `json:"period"`
	Mode            string       `json:"mode"` // full or sample
	PostgresEntries int64        `json:"postgres_entries"`
	RedisEntries    int64        `json:"redis_entries"`
	RedisSorted     int64        `json:"redis_sorted_set"`
	Checked         int64        `json:"checked"`
	MissingInRedis  int64        `json:"missing_in_redis"`
	ExtraInRedis    int64        `json:"extra_in_redis"` // exact in full mode, from counts in sample mode
	Mismatched      int64        `json:"mismatched"`
	Differences     []Difference `json:"differences"` // the first 50
	Consistent      bool         `json:"consistent"`
}

// CheckConsistency compares every entry (full) or a random sample of entries of a board
// in Redis with PostgreSQL, plus the counts.
func (b *Boards) CheckConsistency(ctx context.Context, src *Ranks, board, period string, full bool, sample int) (ConsistencyReport, error) {
	k := b.keys(board, period)
	rep := ConsistencyReport{Board: board, Period: period, Mode: "sample", Differences: []Difference{}}
	if full {
		rep.Mode = "full"
	}
	var err error
	if rep.PostgresEntries, err = src.count(ctx, board, period); err != nil {
		return rep, err
	}
	pipe := b.rdb.Pipeline()
	hlen, zcard := pipe.HLen(ctx, k[1]), pipe.ZCard(ctx, k[0])
	if _, err := pipe.Exec(ctx); err != nil {
		return rep, redisErr("consistency: counts", err)
	}
	rep.RedisEntries, rep.RedisSorted = hlen.Val(), zcard.Val()
	after := ""
	for {
		limit := 2000
		if !full {
			limit = sample
		}
		states, _, err := src.page(ctx, board, period, after, limit, !full)
		if err != nil {
			return rep, err
		}
		if len(states) == 0 {
			break
		}
		if err := b.compare(ctx, k, states, &rep); err != nil {
			return rep, err
		}
		if !full {
			break
		}
		after = states[len(states)-1].UserID
	}
	if full {
		rep.ExtraInRedis = rep.RedisEntries - (rep.Checked - rep.MissingInRedis)
	} else {
		rep.ExtraInRedis = max(0, rep.RedisEntries-rep.PostgresEntries)
	}
	rep.Consistent = rep.MissingInRedis == 0 && rep.Mismatched == 0 && rep.ExtraInRedis == 0 &&
		rep.RedisEntries == rep.RedisSorted && rep.RedisEntries == rep.PostgresEntries
	return rep, nil
}

func (b *Boards) compare(ctx context.Context, k []string, states []EntryState, rep *ConsistencyReport) error {
	users := make([]string, len(states))
	for i, s := range states {
		users[i] = s.UserID
	}
	pipe := b.rdb.Pipeline()
	vals := pipe.HMGet(ctx, k[1], users...)
	scores := make([]*redis.FloatCmd, len(states))
	for i, s := range states {
		scores[i] = pipe.ZScore(ctx, k[0], Member(s.UserID, s.ReachedAt))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return redisErr("consistency: read", err)
	}
	for i, s := range states {
		rep.Checked++
		want := fmt.Sprintf("%d/%d", s.Score, s.Version)
		raw, _ := vals.Val()[i].(string)
		if raw == "" {
			rep.MissingInRedis++
			rep.addDifference(Difference{UserID: s.UserID, Postgres: want})
			continue
		}
		var score, version, updated int64
		var member string
		if _, err := fmt.Sscanf(raw, "%d|%d|%d|%s", &score, &version, &updated, &member); err != nil ||
			score != s.Score || version != s.Version || member != Member(s.UserID, s.ReachedAt) ||
			scores[i].Err() != nil || int64(scores[i].Val()) != s.Score {
			rep.Mismatched++
			rep.addDifference(Difference{UserID: s.UserID, Postgres: want, Redis: fmt.Sprintf("%d/%d", score, version)})
		}
	}
	return nil
}

func (rep *ConsistencyReport) addDifference(d Difference) {
	if len(rep.Differences) < 50 {
		rep.Differences = append(rep.Differences, d)
	}
}

// Maintenance binds the rebuild and consistency check to their stores, and writes each
// run to the audit trail.
type Maintenance struct {
	Boards *Boards
	Ranks  *Ranks
	Audit  *AuditLog
}

// Rebuild rebuilds a board's Redis state from PostgreSQL; actor is who asked.
func (m Maintenance) Rebuild(ctx context.Context, actor, board, period string) (RebuildResult, error) {
	res, err := m.Boards.Rebuild(ctx, m.Ranks, board, period)
	if err != nil {
		return res, err
	}
	return res, m.Audit.Record(ctx, AuditEntry{Actor: actor, Action: "board.rebuild", Target: board + "/" + period,
		Detail: map[string]any{"entries": res.Entries, "version": res.Version, "took_ms": res.Duration.Milliseconds()}})
}

// CheckConsistency compares a board in Redis with PostgreSQL; actor is who asked.
func (m Maintenance) CheckConsistency(ctx context.Context, actor, board, period string, full bool, sample int) (ConsistencyReport, error) {
	rep, err := m.Boards.CheckConsistency(ctx, m.Ranks, board, period, full, sample)
	if err != nil {
		return rep, err
	}
	return rep, m.Audit.Record(ctx, AuditEntry{Actor: actor, Action: "board.consistency", Target: board + "/" + period,
		Detail: map[string]any{"mode": rep.Mode, "checked": rep.Checked, "consistent": rep.Consistent}})
}
