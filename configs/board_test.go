package configs_test

import (
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func sec(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

func board(op, order string) configs.Board {
	return configs.Board{ID: "b", Operator: op, Order: order, Period: configs.PeriodAllTime, MinValue: -1000, MaxValue: 1000}
}

func TestBoardCombine(t *testing.T) {
	t.Parallel()
	cur := &configs.EntryValue{Value: 100, ReachedAt: sec(10), UpdatedAt: sec(20)}
	tests := []struct {
		name    string
		board   configs.Board
		cur     *configs.EntryValue
		v       int64
		at      time.Time
		want    configs.EntryValue
		changed bool
	}{
		{"best desc: first value", board(configs.OpBest, configs.OrderDesc), nil, 5, sec(1), configs.EntryValue{5, sec(1), sec(1)}, true},
		{"best desc: higher wins", board(configs.OpBest, configs.OrderDesc), cur, 101, sec(30), configs.EntryValue{101, sec(30), sec(30)}, true},
		{"best desc: lower is ignored", board(configs.OpBest, configs.OrderDesc), cur, 99, sec(30), *cur, false},
		{"best desc: equal later is ignored", board(configs.OpBest, configs.OrderDesc), cur, 100, sec(30), *cur, false},
		{"best desc: equal reached earlier moves the reach time back, not the update time", board(configs.OpBest, configs.OrderDesc), cur, 100, sec(5), configs.EntryValue{100, sec(5), sec(20)}, true},
		{"best asc: lower wins", board(configs.OpBest, configs.OrderAsc), cur, 99, sec(30), configs.EntryValue{99, sec(30), sec(30)}, true},
		{"best asc: higher is ignored", board(configs.OpBest, configs.OrderAsc), cur, 101, sec(30), *cur, false},
		{"incr desc: adds", board(configs.OpIncr, configs.OrderDesc), cur, 7, sec(30), configs.EntryValue{107, sec(30), sec(30)}, true},
		{"incr asc: adds too (the order is only for ranking)", board(configs.OpIncr, configs.OrderAsc), cur, 7, sec(30), configs.EntryValue{107, sec(30), sec(30)}, true},
		{"incr: a late event keeps the newest times", board(configs.OpIncr, configs.OrderDesc), cur, 7, sec(1), configs.EntryValue{107, sec(10), sec(20)}, true},
		{"incr: the total stops at max_value", board(configs.OpIncr, configs.OrderDesc), cur, 950, sec(30), configs.EntryValue{1000, sec(30), sec(30)}, true},
		{"incr: a delta at max_value keeps the reach time (ties rank it first)", board(configs.OpIncr, configs.OrderDesc), &configs.EntryValue{1000, sec(10), sec(20)}, 5, sec(30), configs.EntryValue{1000, sec(10), sec(30)}, true},
		{"incr: the first delta stops at max_value", board(configs.OpIncr, configs.OrderDesc), nil, 5000, sec(1), configs.EntryValue{1000, sec(1), sec(1)}, true},
		{"set: the latest wins", board(configs.OpSet, configs.OrderDesc), cur, 3, sec(30), configs.EntryValue{3, sec(30), sec(30)}, true},
		{"set: the same value keeps its reach time", board(configs.OpSet, configs.OrderDesc), cur, 100, sec(30), configs.EntryValue{100, sec(10), sec(30)}, true},
		{"set: the next command wins though accepted earlier; the update time does not go back", board(configs.OpSet, configs.OrderDesc), cur, 3, sec(15), configs.EntryValue{3, sec(15), sec(20)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, changed := tt.board.Combine(tt.cur, tt.v, tt.at)
			if got != tt.want || changed != tt.changed {
				t.Errorf("Combine(%+v, %d, %v) = %+v, %v; want %+v, %v", tt.cur, tt.v, tt.at, got, changed, tt.want, tt.changed)
			}
		})
	}
}

func TestBoardCombineIncrNeverOverflows(t *testing.T) {
	t.Parallel()
	b := configs.Board{Operator: configs.OpIncr, MinValue: 0, MaxValue: math.MaxInt64}
	got, _ := b.Combine(&configs.EntryValue{Value: math.MaxInt64 - 1}, 10, sec(1))
	if got.Value != math.MaxInt64 {
		t.Fatalf("MaxInt64-1 + 10 = %d, want MaxInt64", got.Value)
	}
}

func TestBoardUnchanged(t *testing.T) {
	t.Parallel()
	tests := []struct {
		board   configs.Board
		cur, v  int64
		unchang bool
	}{
		{board(configs.OpBest, configs.OrderDesc), 100, 100, true},
		{board(configs.OpBest, configs.OrderDesc), 100, 99, true},
		{board(configs.OpBest, configs.OrderDesc), 100, 101, false},
		{board(configs.OpBest, configs.OrderAsc), 100, 101, true},
		{board(configs.OpBest, configs.OrderAsc), 100, 99, false},
		{board(configs.OpIncr, configs.OrderDesc), 100, 1, false},
		{board(configs.OpSet, configs.OrderDesc), 100, 100, false},
		{board(configs.OpSet, configs.OrderDesc), 100, 5, false},
	}
	for _, tt := range tests {
		if got := tt.board.Unchanged(tt.cur, tt.v); got != tt.unchang {
			t.Errorf("%s %s: Unchanged(%d, %d) = %v, want %v", tt.board.Operator, tt.board.Order, tt.cur, tt.v, got, tt.unchang)
		}
	}
}

func TestBoardBounds(t *testing.T) {
	t.Parallel()
	global := configs.DefaultBoards()[0]
	for v, want := range map[int64]bool{-1: false, 0: true, configs.MaxExactScore: true, configs.MaxExactScore + 1: false} {
		if global.InBounds(v) != want {
			t.Errorf("global.InBounds(%d) = %v", v, !want)
		}
	}
	incr := configs.Board{Operator: configs.OpIncr, MinValue: 0, MaxValue: 1000, MaxDelta: 10}
	for v, want := range map[int64]bool{-1: false, 0: false, 1: true, 10: true, 11: false} {
		if incr.InBounds(v) != want {
			t.Errorf("incr (max_delta 10).InBounds(%d) = %v: a delta is positive and at most max_delta", v, !want)
		}
	}
	asc := configs.Board{Operator: configs.OpBest, Order: configs.OrderAsc}
	if asc.SortKey(5) != -5 || global.SortKey(5) != 5 {
		t.Errorf("SortKey: asc %d, desc %d", asc.SortKey(5), global.SortKey(5))
	}
}

// TestBoardRanksAbove: the ranking of entries on both orders, ties by reach time (to the
// microsecond), then by user id.
func TestBoardRanksAbove(t *testing.T) {
	t.Parallel()
	entries := []configs.Ranked{
		{UserID: "a", Value: 50, ReachedAt: sec(3)},
		{UserID: "b", Value: 70, ReachedAt: sec(9)},
		{UserID: "c", Value: 50, ReachedAt: sec(1)},
		{UserID: "d", Value: 50, ReachedAt: sec(3).Add(400 * time.Nanosecond)}, // same microsecond as a
		{UserID: "e", Value: -5, ReachedAt: sec(2)},
	}
	order := func(b configs.Board) string {
		es := append([]configs.Ranked(nil), entries...)
		sort.Slice(es, func(i, j int) bool { return b.RanksAbove(es[i], es[j]) })
		var ids []string
		for _, e := range es {
			ids = append(ids, e.UserID)
		}
		return strings.Join(ids, "")
	}
	if got := order(board(configs.OpBest, configs.OrderDesc)); got != "bcdae" {
		t.Errorf("desc ranking %s, want bcdae", got)
	}
	if got := order(board(configs.OpBest, configs.OrderAsc)); got != "ecdab" {
		t.Errorf("asc ranking %s, want ecdab", got)
	}
}
