package storage

import (
	"context"
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

// LoadScripts loads the scripts QueueValues runs into Redis (they are run by hash).
func (b *Boards) LoadScripts(ctx context.Context) error {
	return redisErr("load scripts", recordsScript.Load(ctx, b.rdb).Err())
}

// QueueValues queues on pipe the read of users' values on a board period (what Redis holds,
// loaded or not) and returns the function that reads them once the pipe has run: a poller
// reads many boards in one round trip. It runs its script by hash: LoadScripts first.
func (b *Boards) QueueValues(ctx context.Context, pipe redis.Pipeliner, board, period string, users []string) func() ([]Value, error) {
	k := b.keys(board, period)
	args := make([]any, len(users))
	for i, u := range users {
		args[i] = u
	}
	cmd := pipe.EvalSha(ctx, recordsScript.Hash(), []string{k.z, k.u}, args...)
	return func() ([]Value, error) {
		res, err := cmd.Slice()
		if err != nil {
			return nil, redisErr("read values", err)
		}
		st, err := decodeRecords(users, res)
		if err != nil {
			return nil, err
		}
		out := make([]Value, len(users))
		for i, s := range st {
			if s != nil {
				out[i] = Value{Score: s.score, OK: true}
			}
		}
		return out, nil
	}
}
