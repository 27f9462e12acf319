package main

import (
	"fmt"
	"math/rand/v2"
	"sync"
)

// users hands out bench users so that each has at most one submission in flight: its next
// score is then always above the last one it sent, so every submission improves its best
// and must be accepted. Per-user fields are only touched by the goroutine holding the user.
type users struct {
	names []string
	last  []int64 // last score sent (accepted or not)
	best  []int64 // highest score answered 202

	mu   sync.Mutex
	idle []int32
}

func newUsers(n int, prefix string) *users {
	u := &users{names: make([]string, n), last: make([]int64, n), best: make([]int64, n), idle: make([]int32, n)}
	for i := range n {
		u.names[i] = fmt.Sprintf("%s%06d", prefix, i)
		u.idle[i] = int32(i)
	}
	return u
}

// acquire takes a random idle user; false when every user has a request in flight.
func (u *users) acquire() (int32, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := len(u.idle)
	if n == 0 {
		return 0, false
	}
	i := rand.IntN(n)
	id := u.idle[i]
	u.idle[i] = u.idle[n-1]
	u.idle = u.idle[:n-1]
	return id, true
}

func (u *users) release(id int32) {
	u.mu.Lock()
	u.idle = append(u.idle, id)
	u.mu.Unlock()
}

// next is the user's next score: the last one sent plus 1..100.
func (u *users) next(id int32) int64 {
	u.last[id] += 1 + rand.Int64N(100)
	return u.last[id]
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

// outcome is what a submission's answer says about whether it will be applied.
type outcome uint8

const (
	accepted  outcome = iota // 202: durable, must be applied exactly once
	unchanged                // 200 unchanged: never applied
	rejected                 // 4xx: never applied
	ambiguous                // 5xx or transport error: may or may not be applied (at most once)
)

// event is one submission sent.
type event struct {
	id      string
	user    int32
	score   int64
	outcome outcome
}

// ledger records every submission sent, for the exactly-once check.
type ledger struct {
	mu     sync.Mutex
	events []event
}

func (l *ledger) add(e event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *ledger) all() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.events
}
