package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reads of what Redis holds, loaded or not, for tools that check the mirror from outside
// the request path (the bench's exactly-once and visibility checks).

// StoredEntry is a user's entry as a board period's entry hashes hold it.
type StoredEntry struct {
	UserID             string
	Score, Version     int64
	ReachedAt, Updated time.Time
	// Sorted: the sorted set holds the entry's member; Score comes from its sort key, so
	// it is only meaningful when Sorted is set.
	Sorted  bool
	SortKey float64
}

// Stored reads every entry of a board period's entry hashes, each with its member's sort
// key, and the size of its sorted set.
func (b *Boards) Stored(ctx context.Context, board, period string) ([]StoredEntry, int64, error) {
	k := b.keys(board, period)
	buckets, _, err := b.bucketKeys(ctx, k.u)
	if err != nil {
		return nil, 0, err
	}
	pipe := b.rdb.Pipeline()
	all := make([]*redis.MapStringStringCmd, len(buckets))
	for i, key := range buckets {
		all[i] = pipe.HGetAll(ctx, key)
	}
	zcard := pipe.ZCard(ctx, k.z)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, 0, redisErr("read entry hashes", err)
	}
	var users, recs []string
	for _, h := range all {
		for user, rec := range h.Val() {
			if user != "" { // the buckets' state
				users, recs = append(users, user), append(recs, rec)
			}
		}
	}
	out := make([]StoredEntry, len(users))
	const chunk = 1000
	for start := 0; start < len(users); start += chunk {
		end := min(start+chunk, len(users))
		args := []any{"zmscore", k.z}
		for i := start; i < end; i++ {
			if len(recs[i]) < memberPrefixLen {
				return nil, 0, fmt.Errorf("%w for %s: %x", errBadRecord, users[i], recs[i])
			}
			args = append(args, recs[i][:memberPrefixLen]+users[i])
		}
		scores, err := b.rdb.Do(ctx, args...).Slice()
		if err != nil {
			return nil, 0, redisErr("read sort keys", err)
		}
		for i := start; i < end; i++ {
			e := StoredEntry{UserID: users[i]}
			if s := scores[i-start]; s != nil {
				if e.SortKey, err = parseSortKey(s); err != nil {
					return nil, 0, err
				}
				e.Sorted = true
			}
			st, err := decodeRecord(users[i], recs[i], e.SortKey)
			if err != nil {
				return nil, 0, err
			}
			e.Score, e.Version, e.ReachedAt, e.Updated = st.score, st.version, st.reached, st.updated
			out[i] = e
		}
	}
	return out, zcard.Val(), nil
}

// ReadValues reads users' values on board periods (what Redis holds, loaded or not) in
// three pipelined round trips whatever their number, with plain commands: the buckets'
// state of each board period, the users' records (HMGET per bucket), their sort keys
// (ZMSCORE per board period). For pollers that read many entries often (the bench).
func (b *Boards) ReadValues(ctx context.Context, entries []ValueKey) ([]Value, error) {
	type group struct {
		k     keys
		state *redis.StringCmd
		idx   []int // indexes into entries
	}
	groups := map[[2]string]*group{}
	var order []*group
	for i, vk := range entries {
		id := [2]string{vk.Board, vk.Period}
		g := groups[id]
		if g == nil {
			g = &group{k: b.keys(vk.Board, vk.Period)}
			groups[id] = g
			order = append(order, g)
		}
		g.idx = append(g.idx, i)
	}
	pipe := b.rdb.Pipeline()
	for _, g := range order {
		g.state = pipe.HGet(ctx, g.k.u, "")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, redisErr("read values: bucket state", err)
	}
	// The records, one HMGET per bucket of users.
	type fetch struct {
		cmd *redis.SliceCmd
		idx []int
	}
	var fetches []fetch
	pipe = b.rdb.Pipeline()
	for _, g := range order {
		st, err := parseBucketState(g.state)
		if err != nil {
			return nil, err
		}
		byBucket := map[string][]int{}
		var bucketOrder []string
		for _, i := range g.idx {
			key := st.bucketKey(g.k.u, entries[i].UserID)
			if byBucket[key] == nil {
				bucketOrder = append(bucketOrder, key)
			}
			byBucket[key] = append(byBucket[key], i)
		}
		for _, key := range bucketOrder {
			idx := byBucket[key]
			fields := make([]string, len(idx))
			for j, i := range idx {
				fields[j] = entries[i].UserID
			}
			fetches = append(fetches, fetch{pipe.HMGet(ctx, key, fields...), idx})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, redisErr("read values: records", err)
	}
	recs := make([]string, len(entries))
	for _, f := range fetches {
		for j, v := range f.cmd.Val() {
			recs[f.idx[j]], _ = v.(string)
		}
	}
	// The sort keys of the members found.
	type scores struct {
		cmd *redis.Cmd
		idx []int
	}
	var zs []scores
	pipe = b.rdb.Pipeline()
	for _, g := range order {
		args := []any{"zmscore", g.k.z}
		var idx []int
		for _, i := range g.idx {
			if len(recs[i]) > memberPrefixLen {
				args = append(args, recs[i][:memberPrefixLen]+entries[i].UserID)
				idx = append(idx, i)
			}
		}
		if len(idx) > 0 {
			zs = append(zs, scores{pipe.Do(ctx, args...), idx})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, redisErr("read values: sort keys", err)
	}
	out := make([]Value, len(entries))
	for _, z := range zs {
		vals, err := z.cmd.Slice()
		if err != nil {
			return nil, redisErr("read values: sort keys", err)
		}
		for j, v := range vals {
			i := z.idx[j]
			if v == nil {
				continue // the member is missing: no value
			}
			sortKey, err := parseSortKey(v)
			if err != nil {
				return nil, err
			}
			st, err := decodeRecord(entries[i].UserID, recs[i], sortKey)
			if err != nil {
				return nil, err
			}
			out[i] = Value{Score: st.score, OK: true}
		}
	}
	return out, nil
}
