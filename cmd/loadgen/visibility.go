package main

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// pendingScore is an accepted score not yet seen in Redis.
type pendingScore struct {
	score      int64
	acceptedAt time.Time
	phase      *writePhase
}

// visibility measures accept -> visible in Redis: every pollInterval it reads the hash
// field of each user with a pending score (one HMGET per chunk of fields, chunks pipelined)
// and, once the stored score reaches the submitted one, records now - accept time in the
// submission's phase.
type visibility struct {
	rdb      *redis.Client
	key      string // {prefix}:{global:all_time}:u
	names    []string
	interval time.Duration
	chunk    int

	mu      sync.Mutex
	pending map[int32][]pendingScore

	polls     atomic.Int64
	pollTime  atomic.Int64 // total ns spent in poll cycles
	pollMax   atomic.Int64 // longest cycle, ns
	pollErrs  atomic.Int64
	lastError atomic.Value // string
}

func newVisibility(rdb *redis.Client, prefix string, names []string, interval time.Duration, chunk int) *visibility {
	return &visibility{
		rdb: rdb, key: prefix + ":{global:all_time}:u", names: names, interval: interval, chunk: chunk,
		pending: map[int32][]pendingScore{},
	}
}

// add registers an accepted score.
func (v *visibility) add(user int32, score int64, at time.Time, ph *writePhase) {
	ph.visPending.Add(1)
	v.mu.Lock()
	v.pending[user] = append(v.pending[user], pendingScore{score: score, acceptedAt: at, phase: ph})
	v.mu.Unlock()
}

// run polls until ctx ends.
func (v *visibility) run(ctx context.Context) {
	t := time.NewTimer(v.interval)
	defer t.Stop()
	var ids []int32
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		began := time.Now()
		ids = ids[:0]
		v.mu.Lock()
		for id := range v.pending {
			ids = append(ids, id)
		}
		v.mu.Unlock()
		for start := 0; start < len(ids); start += v.chunk * chunksPerTrip {
			v.poll(ctx, ids[start:min(start+v.chunk*chunksPerTrip, len(ids))])
		}
		if len(ids) > 0 {
			d := int64(time.Since(began))
			v.polls.Add(1)
			v.pollTime.Add(d)
			if d > v.pollMax.Load() {
				v.pollMax.Store(d)
			}
		}
		t.Reset(v.interval)
	}
}

// chunksPerTrip is how many HMGETs of v.chunk fields go in one pipelined round trip.
const chunksPerTrip = 8

// poll reads the users' hash fields, one HMGET per chunk of fields, the chunks pipelined.
func (v *visibility) poll(ctx context.Context, ids []int32) {
	pipe := v.rdb.Pipeline()
	var cmds []*redis.SliceCmd
	fields := make([]string, 0, len(ids))
	for start := 0; start < len(ids); start += v.chunk {
		end := min(start+v.chunk, len(ids))
		for _, id := range ids[start:end] {
			fields = append(fields, v.names[id])
		}
		cmds = append(cmds, pipe.HMGet(ctx, v.key, fields[start:end]...))
	}
	_, err := pipe.Exec(ctx)
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
	for c, cmd := range cmds {
		for i, val := range cmd.Val() {
			str, ok := val.(string)
			if !ok {
				continue // field absent: nothing applied yet
			}
			score, ok := parseStoredScore(str)
			if !ok {
				continue
			}
			v.resolve(ids[c*v.chunk+i], score, now)
		}
	}
}

// resolve records every pending score of the user that the stored score reaches; v.mu held.
func (v *visibility) resolve(id int32, score int64, now time.Time) {
	items := v.pending[id]
	keep := items[:0]
	for _, p := range items {
		if score >= p.score {
			p.phase.visible(now, p.acceptedAt)
			continue
		}
		keep = append(keep, p)
	}
	if len(keep) == 0 {
		delete(v.pending, id)
	} else {
		v.pending[id] = keep
	}
}

// parseStoredScore reads the score of a hash value "score|version|updated_micros|member".
func parseStoredScore(val string) (int64, bool) {
	s, _, _ := strings.Cut(val, "|")
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// waitPhase waits until every accepted score of the phase is visible or timeout passes, then
// gives up on the rest and returns how many never became visible.
func (v *visibility) waitPhase(ctx context.Context, ph *writePhase, timeout time.Duration) int64 {
	deadline := time.Now().Add(timeout)
	for ph.visPending.Load() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	var lost int64
	v.mu.Lock()
	defer v.mu.Unlock()
	for id, items := range v.pending {
		keep := items[:0]
		for _, p := range items {
			if p.phase == ph {
				lost++
				p.phase.visPending.Add(-1)
				continue
			}
			keep = append(keep, p)
		}
		if len(keep) == 0 {
			delete(v.pending, id)
		} else {
			v.pending[id] = keep
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
