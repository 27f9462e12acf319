package configs

import (
	"math"
	"time"
)

// The rules of a board live here, as pure code: what its operator does with a value,
// whether a value improves an entry, its bounds, which period an instant falls in, and how
// entries rank (ties included). The HTTP layer and the projector both use them; storage only
// keeps the absolute values they produce.

// Operators: how a board combines a new value with a user's entry.
const (
	OpBest = "best" // keep the better of the two (by the board's order)
	OpIncr = "incr" // add a positive delta
	OpSet  = "set"  // the latest event wins
)

// Orders: which values are better.
const (
	OrderDesc = "desc" // higher is better (the default)
	OrderAsc  = "asc"  // lower is better (lap times)
)

// Period kinds.
const (
	PeriodAllTime = "all_time"
)

// Board describes one leaderboard: how values combine, which are better, and which bounds
// apply.
type Board struct {
	ID       string
	Operator string // best, incr or set
	Order    string // desc or asc
	Period   string // all_time
	MinValue int64
	MaxValue int64
}

// MaxExactScore is the largest integer a Redis sorted-set score (a double) holds exactly.
const MaxExactScore = 1<<53 - 1

// DefaultBoards is the shipped board configuration of this version.
func DefaultBoards() []Board {
	return []Board{
		{ID: "global", Operator: OpBest, Order: OrderDesc, Period: PeriodAllTime, MinValue: 0, MaxValue: MaxExactScore},
	}
}

// Desc reports whether higher values rank first.
func (b Board) Desc() bool { return b.Order != OrderAsc }

// Better reports whether value a ranks strictly above value c on this board.
func (b Board) Better(a, c int64) bool {
	if b.Desc() {
		return a > c
	}
	return a < c
}

// InBounds reports whether a submitted value is within the board's bounds.
func (b Board) InBounds(v int64) bool { return v >= b.MinValue && v <= b.MaxValue }

// ValidPeriod reports whether p names a period of the board: "all_time" for all-time
// boards.
func (b Board) ValidPeriod(p string) bool {
	return b.Period == PeriodAllTime && p == PeriodAllTime
}

// PeriodAt is the period an event accepted at t counts for.
func (b Board) PeriodAt(time.Time) string { return PeriodAllTime }

// Unchanged reports whether submitting v leaves an entry holding cur as it is, so the API
// can answer at once without publishing anything: only a best score that does not beat the
// stored one.
func (b Board) Unchanged(cur, v int64) bool {
	return b.Operator == OpBest && !b.Better(v, cur)
}

// EntryValue is the part of an entry the rules decide: its value, when it reached that
// value (ties rank the earlier first), and when it last changed.
type EntryValue struct {
	Value     int64
	ReachedAt time.Time
	UpdatedAt time.Time
}

// Combine applies an event's value v, accepted at `at`, to an entry (cur is nil when the
// user has none yet) and returns the new state and whether the entry changed. An increment
// never takes the total past the board's bounds (nor past int64): it stops at them.
func (b Board) Combine(cur *EntryValue, v int64, at time.Time) (EntryValue, bool) {
	if cur == nil {
		if b.Operator == OpIncr {
			v = b.clamp(v)
		}
		return EntryValue{Value: v, ReachedAt: at, UpdatedAt: at}, true
	}
	switch b.Operator {
	case OpBest:
		// An equal value reached earlier (an event arriving late) moves the reach time back.
		if b.Better(v, cur.Value) || v == cur.Value && at.Before(cur.ReachedAt) {
			return EntryValue{Value: v, ReachedAt: at, UpdatedAt: at}, true
		}
		return *cur, false
	case OpIncr:
		sum := cur.Value + v
		if v > 0 && sum < cur.Value { // int64 overflow
			sum = math.MaxInt64
		}
		return EntryValue{Value: b.clamp(sum), ReachedAt: maxTime(cur.ReachedAt, at), UpdatedAt: maxTime(cur.UpdatedAt, at)}, true
	case OpSet:
		if at.Before(cur.UpdatedAt) { // an older event than the entry's last change
			return *cur, false
		}
		reached := at
		if v == cur.Value {
			reached = cur.ReachedAt
		}
		return EntryValue{Value: v, ReachedAt: reached, UpdatedAt: at}, true
	}
	return *cur, false
}

func (b Board) clamp(v int64) int64 { return min(max(v, b.MinValue), b.MaxValue) }

func maxTime(a, c time.Time) time.Time {
	if a.After(c) {
		return a
	}
	return c
}

// Ranked is what ranking compares of an entry.
type Ranked struct {
	UserID    string
	Value     int64
	ReachedAt time.Time
}

// RanksAbove reports whether entry a ranks above entry c: the better value first; on equal
// values the entry that reached it first; on equal reach times (microseconds, as stored)
// the greater user id. Every store orders entries this way.
func (b Board) RanksAbove(a, c Ranked) bool {
	if a.Value != c.Value {
		return b.Better(a.Value, c.Value)
	}
	ar, cr := a.ReachedAt.UnixMicro(), c.ReachedAt.UnixMicro()
	if ar != cr {
		return ar < cr
	}
	return a.UserID > c.UserID
}
