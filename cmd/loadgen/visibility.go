package main

import (
	"cmp"
	"context"
	"github.com/openleaderboard/leaderboard/storage"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisKey is the Redis key of a board period's structure (storage/redis.go):
// {prefix}:{board}:{period}:{suffix}, e.g. bench-1:{global}:all_time:u. The braces around
// the board id are a Redis Cluster hash tag: every key of a board lives in one slot.
func redisKey(prefix, board, period, suffix string) string {
	return prefix + ":{" + board + "}:" + period + ":" + suffix
}

// redisVersionKey is a board's version counter, {prefix}:{board}:ver.
func redisVersionKey(prefix, board string) string { return prefix + ":{" + board + "}:ver" }

// pendingScore is an accepted value not yet seen in Redis.
type pendingScore struct {
	score      int64 // the value the entry must reach: the score, or the running sum
	acceptedAt time.Time
	phase      *writePhase
	kind       kind
}

// visTarget is one entry to watch: a user on one board (index into boards).
type visTarget struct{ key, user int32 }

// visibility measures accept -> visible in Redis: every pollInterval it reads the stored
// value of each user with a pending value (plain pipelined commands, v.chunk ×
// chunksPerTrip users per poll) and, once the stored value reaches the awaited one,
// records now - accept time in the submission's phase. Best scores are watched on global, increments on points (their
// running sum), match points on the match's own board (the user's running sum).
type visibility struct {
	rdb      *redis.Client
	store    *storage.Boards
	boards   []string // global, points, then match:{id} of every match
	matches  *matches
	names    []string
	interval time.Duration
	chunk    int
	maxReads int // a poll cycle of n users is followed by a wait of at least n/maxReads s

	mu      sync.Mutex
	pending map[visTarget][]pendingScore

	polls     atomic.Int64
	pollTime  atomic.Int64 // total ns spent in poll cycles
	pollMax   atomic.Int64 // longest cycle, ns
	pollErrs  atomic.Int64
	lastError atomic.Value // string
}

const (
	globalBoard = "global"
	pointsBoard = "points"
	allTime     = "all_time"
)

func newVisibility(rdb *redis.Client, prefix string, names []string, m *matches, interval time.Duration, chunk, maxReads int) *visibility {
	boards := []string{globalBoard, pointsBoard}
	for _, id := range m.ids {
		boards = append(boards, matchBoard(id))
	}
	return &visibility{
		rdb: rdb, store: storage.NewBoards(rdb, prefix, 0), boards: boards, matches: m, names: names, interval: interval, chunk: chunk, maxReads: maxReads,
		pending: map[visTarget][]pendingScore{},
	}
}

// matchBoard is the board id of a match: match:{match_id}.
func matchBoard(matchID string) string { return "match:" + matchID }

// target is the entry where a value of kind k for user shows.
func (v *visibility) target(k kind, user int32) visTarget {
	switch k {
	case kindIncr:
		return visTarget{1, user}
	case kindMatch:
		return visTarget{2 + v.matches.of(user), user}
	}
	return visTarget{0, user}
}

// add registers an accepted value: the user's entry must reach score.
func (v *visibility) add(k kind, user int32, score int64, at time.Time, ph *writePhase) {
	ph.visPending.Add(1)
	t := v.target(k, user)
	v.mu.Lock()
	v.pending[t] = append(v.pending[t], pendingScore{score: score, acceptedAt: at, phase: ph, kind: k})
	v.mu.Unlock()
}

// run polls until ctx ends.
func (v *visibility) run(ctx context.Context) {
	t := time.NewTimer(v.interval)
	defer t.Stop()
	var targets []visTarget
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		began := time.Now()
		targets = targets[:0]
		v.mu.Lock()
		for t := range v.pending {
			targets = append(targets, t)
		}
		v.mu.Unlock()
		slices.SortFunc(targets, func(a, b visTarget) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.user, b.user)) })
		for start := 0; start < len(targets); start += v.chunk * chunksPerTrip {
			v.poll(ctx, targets[start:min(start+v.chunk*chunksPerTrip, len(targets))])
		}
		if len(targets) > 0 {
			d := int64(time.Since(began))
			v.polls.Add(1)
			v.pollTime.Add(d)
			if d > v.pollMax.Load() {
				v.pollMax.Store(d)
			}
		}
		t.Reset(pollWait(v.interval, len(targets), v.maxReads))
	}
}

// pollWait is the wait after a poll cycle that read n users: interval, or longer when at
// that period the poller would read more than maxReads users a second. Without the bound,
// a pipeline that falls behind leaves thousands of users pending, the poller reads them all
// every interval, and its own load on Redis and on the machine's two cores deepens the
// backlog it measures; at that point latencies are seconds, and a coarser poll loses little.
func pollWait(interval time.Duration, n, maxReads int) time.Duration {
	if maxReads <= 0 {
		return interval
	}
	return max(interval, time.Duration(n)*time.Second/time.Duration(maxReads))
}

// chunksPerTrip is how many chunks of v.chunk users go in one poll.
const chunksPerTrip = 8

// poll reads the targets' stored values, all in three pipelined round trips
// (storage.Boards.ReadValues).
func (v *visibility) poll(ctx context.Context, targets []visTarget) {
	keys := make([]storage.ValueKey, len(targets))
	for i, t := range targets {
		keys[i] = storage.ValueKey{Board: v.boards[t.key], Period: allTime, UserID: v.names[t.user]}
	}
	values, err := v.store.ReadValues(ctx, keys)
	now := time.Now()
	if err != nil {
		if ctx.Err() == nil {
			v.pollErrs.Add(1)
			v.lastError.Store(err.Error())
		}
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, val := range values {
		if val.OK { // absent: nothing applied yet
			v.resolve(targets[i], val.Score, now)
		}
	}
}

// resolve records every pending value of the target that the stored value reaches; v.mu
// held.
func (v *visibility) resolve(t visTarget, score int64, now time.Time) {
	items := v.pending[t]
	keep := items[:0]
	for _, p := range items {
		if score >= p.score {
			p.phase.visible(p.kind, now, p.acceptedAt)
			continue
		}
		keep = append(keep, p)
	}
	if len(keep) == 0 {
		delete(v.pending, t)
	} else {
		v.pending[t] = keep
	}
}

// waitPhase waits until every accepted value of the phase is visible or timeout passes,
// then gives up on the rest and returns how many never became visible.
func (v *visibility) waitPhase(ctx context.Context, ph *writePhase, timeout time.Duration) int64 {
	deadline := time.Now().Add(timeout)
	for ph.visPending.Load() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	var lost int64
	v.mu.Lock()
	defer v.mu.Unlock()
	for t, items := range v.pending {
		keep := items[:0]
		for _, p := range items {
			if p.phase == ph {
				lost++
				ph.kinds[p.kind].notVisible++
				p.phase.visPending.Add(-1)
				continue
			}
			keep = append(keep, p)
		}
		if len(keep) == 0 {
			delete(v.pending, t)
		} else {
			v.pending[t] = keep
		}
	}
	return lost
}

// pollerStats describes the poller's cycles (cycles with nothing pending are not counted).
type pollerStats struct {
	Cycles      int64   `json:"cycles"`
	MeanCycleMs float64 `json:"mean_cycle_ms"`
	MaxCycleMs  float64 `json:"max_cycle_ms"`
	Errors      int64   `json:"errors"`
}

func (v *visibility) stats() pollerStats {
	s := pollerStats{Cycles: v.polls.Load(), MaxCycleMs: ms(time.Duration(v.pollMax.Load())), Errors: v.pollErrs.Load()}
	if s.Cycles > 0 {
		s.MeanCycleMs = ms(time.Duration(v.pollTime.Load() / s.Cycles))
	}
	return s
}
