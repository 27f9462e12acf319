package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"
)

// Difference is one entry on which Redis and PostgreSQL disagree.
type Difference struct {
	UserID string `json:"user_id"`
	// Field is what differs: "entry" (score, version, rank order or time), "nick_name" or
	// "metadata"; empty for an entry missing from one side.
	Field    string `json:"field,omitempty"`
	Postgres string `json:"postgres"` // "score/version" ("" when missing), or the nick name or metadata
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

// consistencySettle is how long a check waits before it reads again the entries on
// which Redis and PostgreSQL differed: under writes PostgreSQL leads Redis by the
// pipeline's lag, and a difference that does not stay is not one.
const consistencySettle = time.Second

// recheckCap bounds the entries a check reads again; past it, differences are reported
// as first found.
const recheckCap = 10_000

// CheckConsistency compares every entry (full) or a random sample of entries of a board
// in Redis with PostgreSQL, plus the counts. Entries that differ are read again from
// both after consistencySettle, and only those that still differ count (a board taking
// writes does not raise false alarms). In full mode the entries Redis holds that
// PostgreSQL does not are found by a scan of the sorted set, so the counts, which a
// board gaining players changes during the check, are reported but not compared; in
// sample mode they are the only view of missing and extra entries, read again after
// consistencySettle when they differ.
func (b *Boards) CheckConsistency(ctx context.Context, src *Ranks, board, period string, full bool, sample int) (ConsistencyReport, error) {
	k := b.keys(board, period)
	rep := ConsistencyReport{Board: board, Period: period, Mode: "sample", Differences: []Difference{}}
	if full {
		rep.Mode = "full"
	}
	if err := b.counts(ctx, src, k, &rep); err != nil {
		return rep, err
	}
	loaded, err := b.rdb.Exists(ctx, k.top).Result()
	if err != nil {
		return rep, redisErr("consistency: loaded", err)
	}
	rep.Loaded = loaded == 1
	after := ""
	var suspects []string
	for {
		limit := 2000
		if !full {
			limit = sample
		}
		states, nicks, err := src.page(ctx, board, period, after, limit, !full)
		if err != nil {
			return rep, err
		}
		if len(states) == 0 {
			break
		}
		differ, err := b.compare(ctx, k, states, nicks, &rep)
		if err != nil {
			return rep, err
		}
		suspects = append(suspects, differ...)
		if !full {
			break
		}
		after = states[len(states)-1].UserID
	}
	var extra []string
	if full {
		if extra, err = b.extraInRedis(ctx, src, k, board, period); err != nil {
			return rep, err
		}
	}
	if len(suspects)+len(extra) > 0 && len(suspects) <= recheckCap && len(extra) <= recheckCap {
		if err := sleepCtx(ctx, consistencySettle); err != nil {
			return rep, err
		}
		if err := b.recheck(ctx, src, k, board, period, suspects, &rep); err != nil {
			return rep, err
		}
		if extra, err = src.absent(ctx, board, period, extra); err != nil {
			return rep, err
		}
		if extra, err = b.inRedis(ctx, k, extra); err != nil {
			return rep, err
		}
	}
	if rep.RedisEntries != rep.RedisSorted || (!full && rep.RedisEntries != rep.PostgresEntries) {
		if err := sleepCtx(ctx, consistencySettle); err != nil { // counts of one moment may differ
			return rep, err
		}
		if err := b.counts(ctx, src, k, &rep); err != nil {
			return rep, err
		}
	}
	if full {
		rep.ExtraInRedis = int64(len(extra))
		for _, u := range extra {
			rep.addDifference(Difference{UserID: u, Redis: "present"})
		}
	} else {
		rep.ExtraInRedis = max(0, rep.RedisEntries-rep.PostgresEntries)
	}
	rep.Consistent = rep.MissingInRedis == 0 && rep.Mismatched == 0 && rep.ExtraInRedis == 0 &&
		rep.RedisEntries == rep.RedisSorted && (full || rep.RedisEntries == rep.PostgresEntries)
	return rep, nil
}

// counts reads the entry counts: PostgreSQL's, then Redis's hash and sorted set in one
// transaction (a write between two reads would make them differ).
func (b *Boards) counts(ctx context.Context, src *Ranks, k keys, rep *ConsistencyReport) error {
	var err error
	if rep.PostgresEntries, err = src.count(ctx, rep.Board, rep.Period); err != nil {
		return err
	}
	keys, state, err := b.bucketKeys(ctx, k.u)
	if err != nil {
		return err
	}
	var lens []*redis.IntCmd
	var card *redis.IntCmd
	if _, err := b.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, key := range keys {
			lens = append(lens, pipe.HLen(ctx, key))
		}
		card = pipe.ZCard(ctx, k.z)
		return nil
	}); err != nil {
		return redisErr("consistency: count", err)
	}
	rep.RedisEntries = 0
	for _, l := range lens {
		rep.RedisEntries += l.Val()
	}
	if state {
		rep.RedisEntries--
	}
	rep.RedisSorted = card.Val()
	return nil
}

// extraInRedis scans the sorted set and returns the users it holds that PostgreSQL has no
// visible entry of (each once, though a scan may return a member twice).
func (b *Boards) extraInRedis(ctx context.Context, src *Ranks, k keys, board, period string) ([]string, error) {
	seen := map[string]bool{}
	var extra []string
	var cursor uint64
	for {
		members, next, err := b.rdb.ZScan(ctx, k.z, cursor, "", 2000).Result()
		if err != nil {
			return nil, redisErr("consistency: scan", err)
		}
		users := make([]string, 0, len(members)/2)
		for i := 0; i < len(members); i += 2 { // member, score
			if m := members[i]; len(m) > memberPrefixLen {
				users = append(users, m[memberPrefixLen:])
			}
		}
		absent, err := src.absent(ctx, board, period, users)
		if err != nil {
			return nil, err
		}
		for _, u := range absent {
			if !seen[u] {
				seen[u] = true
				extra = append(extra, u)
			}
		}
		if cursor = next; cursor == 0 {
			return extra, nil
		}
	}
}

// inRedis returns those of users whose entry Redis holds.
func (b *Boards) inRedis(ctx context.Context, k keys, users []string) ([]string, error) {
	if len(users) == 0 {
		return nil, nil
	}
	res, err := b.records(ctx, k, users)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, u := range users {
		if rec, _ := res[2*i].(string); rec != "" {
			out = append(out, u)
		}
	}
	return out, nil
}

// recheck reads the users' entries again from both stores and replaces their first
// findings with what it finds now.
func (b *Boards) recheck(ctx context.Context, src *Ranks, k keys, board, period string, users []string, rep *ConsistencyReport) error {
	if len(users) == 0 {
		return nil
	}
	states, nicks, err := src.statesOf(ctx, board, period, users)
	if err != nil {
		return err
	}
	again := ConsistencyReport{Differences: []Difference{}}
	if len(states) > 0 {
		if _, err := b.compare(ctx, k, states, nicks, &again); err != nil {
			return err
		}
	}
	// A user whose entry is gone from PostgreSQL meanwhile (removed, banned) is no
	// difference of its own: the sorted-set scan finds it if Redis kept it.
	rep.MissingInRedis, rep.Mismatched = again.MissingInRedis, again.Mismatched
	rep.Differences = again.Differences
	return nil
}

// records reads the users' entry records and sort keys from Redis, two fields a user.
func (b *Boards) records(ctx context.Context, k keys, users []string) ([]any, error) {
	args := make([]any, len(users))
	for i, u := range users {
		args[i] = u
	}
	res, err := recordsScript.Run(ctx, b.rdb, []string{k.z, k.u}, args...).Slice()
	if err != nil {
		return nil, redisErr("consistency: read", err)
	}
	if len(res) != 2*len(users) {
		return nil, fmt.Errorf("consistency: %d fields for %d users", len(res), len(users))
	}
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// compare checks states against Redis, counting into rep, and returns the users that
// differ: in their entry (score, version, member, sort key, time), their nick name
// (nicks: PostgreSQL's, by user) or their metadata.
func (b *Boards) compare(ctx context.Context, k keys, states []EntryState, nicks map[string]string, rep *ConsistencyReport) ([]string, error) {
	args := make([]any, len(states))
	for i, s := range states {
		args[i] = s.UserID
	}
	res, err := checkScript.Run(ctx, b.rdb, []string{k.z, k.u, k.n, k.m}, args...).Slice()
	if err != nil {
		return nil, redisErr("consistency: read", err)
	}
	if len(res) != 4*len(states) {
		return nil, fmt.Errorf("consistency: %d fields for %d users", len(res), len(states))
	}
	var differ []string
	for i, s := range states {
		rep.Checked++
		want := fmt.Sprintf("%d/%d", s.Score, s.Version)
		f := res[4*i : 4*i+4]
		rec, _ := f[0].(string)
		if rec == "" {
			rep.MissingInRedis++
			rep.addDifference(Difference{UserID: s.UserID, Postgres: want})
			differ = append(differ, s.UserID)
			continue
		}
		sortKey, err := parseSortKey(f[1])
		var st storedEntry
		if err == nil {
			st, err = decodeRecord(s.UserID, rec, sortKey)
		}
		got := fmt.Sprintf("%d/%d", st.score, st.version)
		nick, _ := f[2].(string)
		meta, _ := f[3].(string)
		d := Difference{UserID: s.UserID, Postgres: want, Redis: got}
		switch {
		case err != nil || st.score != s.Score || st.version != s.Version || st.member != redisMember(s.UserID, s.ReachedAt) ||
			!st.updated.Equal(s.UpdatedAt.Truncate(time.Microsecond)) || int64(sortKey) != s.SortKey:
			d.Field = "entry"
		case nick != nicks[s.UserID]:
			d.Field, d.Postgres, d.Redis = "nick_name", nicks[s.UserID], nick
		case !sameJSON(meta, string(s.Metadata)):
			d.Field, d.Postgres, d.Redis = "metadata", string(s.Metadata), meta
		default:
			continue
		}
		rep.Mismatched++
		rep.addDifference(d)
		differ = append(differ, s.UserID)
	}
	return differ, nil
}

// sameJSON reports whether two JSON texts (or two empty strings) hold the same value.
func sameJSON(a, b string) bool {
	if a == b {
		return true
	}
	if a == "" || b == "" {
		return false
	}
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
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
