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

// Board describes one leaderboard: how values combine, which are better, which period an
// event counts for, and which values and callers it takes.
type Board struct {
	ID       string
	Operator string // best, incr or set
	Order    string // desc or asc
	Period   string // all_time, daily, weekly, season or match
	MinValue int64
	MaxValue int64
	// MaxDelta bounds one increment of an incr board.
	MaxDelta int64
	// ServerOnly boards refuse player tokens.
	ServerOnly bool
	// ActionCooldown is how long an increment with an action_id locks that action for its
	// user (0: no cooldown).
	ActionCooldown time.Duration
	// MatchPoints boards also receive every match point (POST /v1/matches/.../point).
	MatchPoints bool
	// RateLimit bounds each user's player writes to this board, on top of the service's
	// per-user limit (zero: none).
	RateLimit Rate
	// Match is the match id of a match board instance (match:{id}); empty otherwise.
	Match string
}

// MaxExactScore is the largest integer a Redis sorted-set score (a double) holds exactly;
// values stay within ±MaxExactScore.
const MaxExactScore = 1<<53 - 1

// DefaultBoards is the shipped board configuration (API.md, Boards).
func DefaultBoards() []Board {
	return []Board{
		{ID: "global", Operator: OpBest, Order: OrderDesc, Period: PeriodAllTime, MinValue: 0, MaxValue: MaxExactScore},
		{ID: "points", Operator: OpIncr, Order: OrderDesc, Period: PeriodAllTime, MinValue: 0, MaxValue: MaxExactScore, MaxDelta: 1_000_000},
		{ID: "daily", Operator: OpIncr, Order: OrderDesc, Period: PeriodDaily, MinValue: 0, MaxValue: MaxExactScore, MaxDelta: 1_000_000, ServerOnly: true, MatchPoints: true},
		{ID: "season", Operator: OpIncr, Order: OrderDesc, Period: PeriodSeason, MinValue: 0, MaxValue: MaxExactScore, MaxDelta: 1_000_000, ServerOnly: true, MatchPoints: true},
		{ID: "match", Operator: OpIncr, Order: OrderDesc, Period: PeriodMatch, MinValue: 0, MaxValue: MaxExactScore, MaxDelta: 1_000_000, ServerOnly: true},
		{ID: "fastest", Operator: OpBest, Order: OrderAsc, Period: PeriodWeekly, MinValue: 1, MaxValue: MaxExactScore},
	}
}

// Key is the id under which the board's entries are stored: its id, or match:{id} for a
// match board instance.
func (b Board) Key() string {
	if b.Match != "" {
		return b.ID + ":" + b.Match
	}
	return b.ID
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

// InBounds reports whether a submitted value is within the board's bounds: for an incr
// board a positive delta of at most MaxDelta, for the others a value in [MinValue,
// MaxValue].
func (b Board) InBounds(v int64) bool {
	if b.Operator == OpIncr {
		return v > 0 && v <= b.MaxDelta
	}
	return v >= b.MinValue && v <= b.MaxValue
}

// ValueInBounds reports whether v may be an entry's value on this board (min_value to
// max_value): what an admin may set an entry to.
func (b Board) ValueInBounds(v int64) bool { return v >= b.MinValue && v <= b.MaxValue }

// SortKey is the value by which an entry ranks: higher first. It is the value on desc
// boards and its negation on asc ones, so stores order every board the same way.
func (b Board) SortKey(v int64) int64 {
	if b.Desc() {
		return v
	}
	return -v
}

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
		// The update time does not go back (a better value accepted before the entry's
		// last change, committed after it).
		if b.Better(v, cur.Value) || v == cur.Value && at.Before(cur.ReachedAt) {
			return EntryValue{Value: v, ReachedAt: at, UpdatedAt: maxTime(cur.UpdatedAt, at)}, true
		}
		return *cur, false
	case OpIncr:
		sum := cur.Value + v
		if v > 0 && sum < cur.Value { // int64 overflow
			sum = math.MaxInt64
		}
		total, reached := b.clamp(sum), maxTime(cur.ReachedAt, at)
		if total == cur.Value { // stopped at the bound: the value was reached before, and ties rank it so
			reached = cur.ReachedAt
		}
		return EntryValue{Value: total, ReachedAt: reached, UpdatedAt: maxTime(cur.UpdatedAt, at)}, true
	case OpSet:
		// The latest command of the user's (their commit order) wins, also one accepted
		// before the entry's last change (another API process's clock, or a write committed
		// after an admin's adjustment): the update time does not go back.
		reached := at
		if v == cur.Value {
			reached = cur.ReachedAt
		}
		return EntryValue{Value: v, ReachedAt: reached, UpdatedAt: maxTime(cur.UpdatedAt, at)}, true
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

// Reflects reports whether an entry holding value, last changed at updatedAt, shows an
// applied event of value v accepted at `at` (stores keep times to the microsecond): a best
// entry at least as good as v, or an incr or set entry changed at or after `at`.
func (b Board) Reflects(value int64, updatedAt time.Time, v int64, at time.Time) bool {
	if b.Operator == OpBest {
		return !b.Better(v, value)
	}
	return !updatedAt.Before(at.Truncate(time.Microsecond))
}
