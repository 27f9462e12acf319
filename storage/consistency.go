package storage

import (
	"context"
	"fmt"
	"time"
)

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
	// Loaded: Redis holds the period (its cached top); a period whose keys expired (a
	// finished match, an idle season) is loaded again by its next read or write.
	Loaded     bool `json:"loaded"`
	Consistent bool `json:"consistent"`
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
	if rep.RedisEntries, err = b.recordCount(ctx, k.u); err != nil {
		return rep, err
	}
	if rep.RedisSorted, err = b.rdb.ZCard(ctx, k.z).Result(); err != nil {
		return rep, redisErr("consistency: count", err)
	}
	loaded, err := b.rdb.Exists(ctx, k.top).Result()
	if err != nil {
		return rep, redisErr("consistency: loaded", err)
	}
	rep.Loaded = loaded == 1
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

func (b *Boards) compare(ctx context.Context, k keys, states []EntryState, rep *ConsistencyReport) error {
	users := make([]string, len(states))
	for i, s := range states {
		users[i] = s.UserID
	}
	args := make([]any, len(users))
	for i, u := range users {
		args[i] = u
	}
	res, err := recordsScript.Run(ctx, b.rdb, []string{k.z, k.u}, args...).Slice()
	if err != nil {
		return redisErr("consistency: read", err)
	}
	if len(res) != 2*len(users) {
		return fmt.Errorf("consistency: %d fields for %d users", len(res), len(users))
	}
	for i, s := range states {
		rep.Checked++
		want := fmt.Sprintf("%d/%d", s.Score, s.Version)
		rec, _ := res[2*i].(string)
		if rec == "" {
			rep.MissingInRedis++
			rep.addDifference(Difference{UserID: s.UserID, Postgres: want})
			continue
		}
		sortKey, err := parseSortKey(res[2*i+1])
		var st storedEntry
		if err == nil {
			st, err = decodeRecord(s.UserID, rec, sortKey)
		}
		if err != nil || st.score != s.Score || st.version != s.Version || st.member != redisMember(s.UserID, s.ReachedAt) ||
			!st.updated.Equal(s.UpdatedAt.Truncate(time.Microsecond)) || int64(sortKey) != s.SortKey {
			rep.Mismatched++
			rep.addDifference(Difference{UserID: s.UserID, Postgres: want, Redis: fmt.Sprintf("%d/%d", st.score, st.version)})
		}
	}
	return nil
}

func (rep *ConsistencyReport) addDifference(d Difference) {
	if len(rep.Differences) < 50 {
		rep.Differences = append(rep.Differences, d)
	}
}

// CheckConsistency compares a board period in Redis with PostgreSQL; actor is who asked. A
// period whose keys expire (t.TTL) and expired altogether is consistent: not loaded, its
// next read or write loads it. One Redis lost otherwise is not.
func (m Maintenance) CheckConsistency(ctx context.Context, actor string, t Target, full bool, sample int) (ConsistencyReport, error) {
	rep, err := m.Boards.CheckConsistency(ctx, m.Ranks, t.Board, t.Period, full, sample)
	if err != nil {
		return rep, err
	}
	if !rep.Loaded && rep.RedisEntries == 0 && rep.RedisSorted == 0 && t.TTL > 0 {
		rep.Consistent = true
	}
	return rep, m.Audit.Record(ctx, AuditEntry{Actor: actor, Action: "board.consistency", Target: t.Board + "/" + t.Period,
		Detail: map[string]any{"mode": rep.Mode, "checked": rep.Checked, "consistent": rep.Consistent}})
}
