package main

import (
	"fmt"
	"math/rand/v2"
	"sync"
)

// kind is what a write does: a best score on global, an increment on points, or a match
// point (match:{id}, daily and season at once).
type kind uint8

const (
	kindBest kind = iota
	kindIncr
	kindMatch
	numKinds
)

var kindNames = [numKinds]string{"best", "incr", "match"}

func (k kind) String() string { return kindNames[k] }

// rows is how many score_history rows an applied command of this kind leaves: one per board
// it touches.
func (k kind) rows() int64 {
	if k == kindMatch {
		return 3
	}
	return 1
}

// users hands out bench users so that each has at most one submission of each kind in
// flight: its next best score is then always above the last one it sent, so every best
// submission improves and must be accepted, and the running sum of a user's accepted
// increments (or match points) is the value its entry must reach once the last one is
// applied. Per-user fields of a kind are only touched by the goroutine holding the user for
// that kind.
type users struct {
	names []string
	last  []int64 // best: last score sent (accepted or not)
	best  []int64 // best: highest score answered 202
	// sum[k][user] is the sum of the user's values of kind k answered 202 (incr and match).
	sum [numKinds][]int64

	idle [numKinds]idlePool
}

func newUsers(n int, prefix string) *users {
	u := &users{names: make([]string, n), last: make([]int64, n), best: make([]int64, n)}
	for k := range numKinds {
		u.sum[k] = make([]int64, n)
		u.idle[k].ids = make([]int32, n)
	}
	for i := range n {
		u.names[i] = fmt.Sprintf("%s%06d", prefix, i)
		for k := range numKinds {
			u.idle[k].ids[i] = int32(i)
		}
	}
	return u
}

// idlePool is the users that have no request of one kind in flight.
type idlePool struct {
	mu  sync.Mutex
	ids []int32
}

// acquire takes a random idle user; false when every user has a request in flight.
func (p *idlePool) acquire() (int32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.ids)
	if n == 0 {
		return 0, false
	}
	i := rand.IntN(n)
	id := p.ids[i]
	p.ids[i] = p.ids[n-1]
	p.ids = p.ids[:n-1]
	return id, true
}

func (p *idlePool) release(id int32) {
	p.mu.Lock()
	p.ids = append(p.ids, id)
	p.mu.Unlock()
}

// acquire takes a random user with no best score in flight.
func (u *users) acquire() (int32, bool) { return u.idle[kindBest].acquire() }

func (u *users) release(id int32) { u.idle[kindBest].release(id) }

// acquireKind takes a random user with no request of kind k in flight.
func (u *users) acquireKind(k kind) (int32, bool) { return u.idle[k].acquire() }

func (u *users) releaseKind(k kind, id int32) { u.idle[k].release(id) }

// next is the user's next score: the last one sent plus 1..100.
func (u *users) next(id int32) int64 {
	u.last[id] += 1 + rand.Int64N(100)
	return u.last[id]
}

// accept records a 202 for a value of kind k and returns the value the user's entry must
// reach once it is applied: the score for best, the running sum of accepted values for
// incr and match. The caller holds the user for k.
func (u *users) accept(k kind, id int32, value int64) int64 {
	if k == kindBest {
		u.best[id] = value
		return value
	}
	u.sum[k][id] += value
	return u.sum[k][id]
}

// known are the users with at least one accepted score; call when no phase runs.
func (u *users) known() []int32 {
	var ids []int32
	for i, b := range u.best {
		if b > 0 {
			ids = append(ids, int32(i))
		}
	}
	return ids
}

// matches assigns users to matches of size players: user i plays in match i/size.
type matches struct {
	size int
	ids  []string
}

func newMatches(users, size int) *matches {
	n := (users + size - 1) / size
	m := &matches{size: size, ids: make([]string, n)}
	for i := range n {
		m.ids[i] = fmt.Sprintf("bench-m-%06d", i)
	}
	return m
}

// of is the index of the user's match.
func (m *matches) of(user int32) int32 { return user / int32(m.size) }

// outcome is what a submission's answer says about whether it will be applied.
type outcome uint8

const (
	accepted  outcome = iota // 202: durable, must be applied exactly once
	unchanged                // 200 unchanged: never applied
	rejected                 // 4xx: never applied
	ambiguous                // 5xx or transport error: may or may not be applied (at most once)
)

// event is one submission sent: a best score, an increment's delta or a match point.
type event struct {
	id      string
	user    int32
	score   int64 // the value sent: score, delta or point
	kind    kind
	outcome outcome
}

// ledger records every submission sent, for the exactly-once check.
type ledger struct{ chunked[event] }

// pipelineRows is how many score_history rows the sends so far must leave (want: 202s) and
// may leave on top (maybe: ambiguous sends).
func (l *ledger) pipelineRows() (want, maybe int64) {
	l.each(func(e event) {
		switch e.outcome {
		case accepted:
			want += e.kind.rows()
		case ambiguous:
			maybe += e.kind.rows()
		}
	})
	return want, maybe
}
