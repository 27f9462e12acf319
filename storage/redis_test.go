package storage_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/openleaderboard/leaderboard/storage"
)

type boardsFixture struct {
	t      *testing.T
	rdb    *redis.Client
	prefix string
	boards *storage.Boards
}

// newBoardsFixture has global/all_time loaded (empty).
func newBoardsFixture(t *testing.T, topN int) *boardsFixture {
	t.Helper()
	rdb, prefix := newTestRedis(t)
	f := &boardsFixture{t: t, rdb: rdb, prefix: prefix, boards: storage.NewBoards(rdb, prefix, topN)}
	f.load("global", "all_time")
	return f
}

// load marks a board period loaded, with no entries.
func (f *boardsFixture) load(board, period string) storage.Top {
	f.t.Helper()
	top, err := f.boards.Load(testContext(f.t), storage.Target{Board: board, Period: period}, noPages)
	if err != nil {
		f.t.Fatalf("Load: %v", err)
	}
	return top
}

func noPages() ([]storage.EntryState, map[string]string, error) { return nil, nil, nil }

var global = storage.Target{Board: "global", Period: "all_time"}

func state(user string, score, version int64, reached time.Time) storage.EntryState {
	return storage.EntryState{Board: "global", Period: "all_time", UserID: user, Score: score, SortKey: score, Version: version, ReachedAt: reached, UpdatedAt: reached}
}

func (f *boardsFixture) apply(nicks map[string]string, states ...storage.EntryState) (storage.Top, bool) {
	f.t.Helper()
	top, changed, err := f.boards.Apply(testContext(f.t), global, states, nicks)
	if err != nil {
		f.t.Fatalf("Apply: %v", err)
	}
	return top, changed
}

func (f *boardsFixture) top(limit int) storage.Top {
	f.t.Helper()
	top, err := f.boards.Top(testContext(f.t), "global", "all_time", limit)
	if err != nil {
		f.t.Fatalf("Top: %v", err)
	}
	return top
}

func (f *boardsFixture) user(id string) storage.Entry {
	f.t.Helper()
	e, err := f.boards.User(testContext(f.t), "global", "all_time", id)
	if err != nil {
		f.t.Fatalf("User(%s): %v", id, err)
	}
	return e
}

// zcard counts the members of the board's sorted set (layout documented in redis.go).
func (f *boardsFixture) zcard() int64 {
	f.t.Helper()
	n, err := f.rdb.ZCard(testContext(f.t), f.prefix+":{global}:all_time:z").Result()
	if err != nil {
		f.t.Fatalf("ZCARD: %v", err)
	}
	return n
}

func (f *boardsFixture) checkOrder(want ...string) {
	f.t.Helper()
	top := f.top(100)
	var got []string
	for i, e := range top.Entries {
		got = append(got, e.UserID)
		if e.Rank != int64(i+1) {
			f.t.Errorf("Top entry %d (%s) has rank %d, want %d", i, e.UserID, e.Rank, i+1)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		f.t.Fatalf("Top order = %v, want %v", got, want)
	}
	for i, id := range want {
		if e := f.user(id); e.Rank != int64(i+1) {
			f.t.Errorf("User(%s).Rank = %d, Top puts it at %d", id, e.Rank, i+1)
		}
	}
}

func TestBoardsRanksAreOneBased(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	f.apply(nil, state("a", 100, 1, at(1)), state("b", 300, 1, at(2)), state("c", 200, 1, at(3)))

	f.checkOrder("b", "c", "a")
	top := f.top(10)
	for i, want := range []int64{300, 200, 100} {
		if top.Entries[i].Score != want {
			t.Errorf("Top entry %d score = %d, want %d", i, top.Entries[i].Score, want)
		}
	}
	c := f.user("c")
	if c.Score != 200 || c.UserID != "c" || !c.UpdatedAt.Equal(at(3)) {
		t.Errorf("User(c) = %+v, want score 200 updated %s", c, at(3))
	}
	if !top.Entries[1].UpdatedAt.Equal(at(3)) {
		t.Errorf("Top entry c updated_at = %s, want %s", top.Entries[1].UpdatedAt, at(3))
	}
}

func TestBoardsTiesRankEarlierFirst(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	// Applied in an order unrelated to reached_at, in two calls.
	f.apply(nil, state("late", 100, 1, at(30)), state("first", 100, 1, at(10)))
	f.apply(nil, state("middle", 100, 1, at(20)), state("top", 101, 1, at(40)), state("low", 99, 1, at(1)))

	f.checkOrder("top", "first", "middle", "late", "low")
}

func TestBoardsHugeScoresKeepOrder(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	const big = 1<<53 - 1
	f.apply(nil, state("max", big, 1, at(1)), state("below", big-1, 1, at(2)))
	f.checkOrder("max", "below")
	if got := f.top(10).Entries[0].Score; got != big {
		t.Errorf("Top score = %d, want %d", got, big)
	}
	if got := f.user("below").Score; got != big-1 {
		t.Errorf("User score = %d, want %d", got, big-1)
	}
	// Beyond 2^53 a sorted-set score is not exact; the value read back still is.
	const huge = 1<<60 + 1
	f.apply(nil, state("huge", huge, 1, at(3)))
	if got := f.top(10).Entries[0]; got.UserID != "huge" || got.Score != huge {
		t.Errorf("Top first = %s %d, want huge %d", got.UserID, got.Score, int64(huge))
	}
	if got := f.user("huge").Score; got != huge {
		t.Errorf("User score = %d, want %d", got, int64(huge))
	}
}

func TestBoardsVersionGuardIgnoresOlderStates(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	f.apply(nil, state("u", 500, 2, at(20)))
	_, changed := f.apply(nil, state("u", 100, 1, at(10))) // older version, delivered late
	if changed {
		t.Errorf("an ignored older state reported the top as changed")
	}
	f.apply(nil, state("u", 700, 2, at(30))) // same version: ignored too

	if e := f.user("u"); e.Score != 500 || !e.UpdatedAt.Equal(at(20)) {
		t.Errorf("User(u) = %+v, want the version-2 state (score 500)", e)
	}
	if top := f.top(10); len(top.Entries) != 1 || top.Entries[0].Score != 500 {
		t.Errorf("Top = %+v, want u with 500", top.Entries)
	}
	if n := f.zcard(); n != 1 {
		t.Errorf("ZCARD = %d, want 1", n)
	}

	f.apply(nil, state("u", 900, 3, at(40)))
	if e := f.user("u"); e.Score != 900 {
		t.Errorf("User(u).Score = %d after a newer version, want 900", e.Score)
	}
}

func TestBoardsMovedMemberIsNotDuplicated(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	f.apply(nil, state("a", 10, 1, at(1)), state("b", 20, 1, at(2)), state("c", 30, 1, at(3)))
	// a and b reach new scores at new times (new members), c is re-sent unchanged.
	f.apply(nil, state("a", 50, 2, at(10)), state("b", 25, 2, at(11)), state("c", 30, 1, at(3)))
	// a's reached_at changes again without a score change (an earlier equal score arrived).
	f.apply(nil, state("a", 50, 3, at(5)))

	if n := f.zcard(); n != 3 {
		t.Errorf("ZCARD = %d, want 3 (one member per user)", n)
	}
	members, err := f.rdb.ZRange(testContext(t), f.prefix+":{global}:all_time:z", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]int{}
	for _, m := range members {
		users[m[8:]]++ // after the 8-byte time prefix (redis.go)
	}
	if users["a"] != 1 || users["b"] != 1 || users["c"] != 1 {
		t.Errorf("sorted-set members by user = %v, want one each of a, b, c", users)
	}
	f.checkOrder("a", "c", "b")
	page, err := f.boards.Page(testContext(t), "global", "all_time", nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if page[0].UserID != "a" || page[0].Position.Member != storage.Member("a", at(5)) {
		t.Errorf("first entry %s at %q, want a at %q (its last reach time)", page[0].UserID, page[0].Position.Member, storage.Member("a", at(5)))
	}
	if top := f.top(10); len(top.Entries) != 3 {
		t.Errorf("Top has %d entries, want 3", len(top.Entries))
	}
}

func TestBoardsChangedFlagAndVersion(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	states := []storage.EntryState{state("a", 10, 1, at(1)), state("b", 20, 1, at(2))}

	top1, changed := f.apply(nil, states...)
	if !changed {
		t.Errorf("first Apply: changed = false, want true")
	}
	if top1.Version < 1 {
		t.Errorf("first Apply: version %d, want >= 1", top1.Version)
	}
	if len(top1.Entries) != 2 || top1.Entries[0].UserID != "b" {
		t.Errorf("first Apply returned entries %+v", top1.Entries)
	}

	top2, changed := f.apply(nil, states...) // a redelivery repairs nothing
	if changed {
		t.Errorf("re-applying the same states: changed = true, want false")
	}
	if top2.Version != top1.Version {
		t.Errorf("re-applying the same states moved the version %d -> %d", top1.Version, top2.Version)
	}
	if len(top2.Entries) != 0 {
		t.Errorf("unchanged Apply returned %d entries, want none (the top is not read again)", len(top2.Entries))
	}

	top3, changed := f.apply(nil, state("a", 30, 2, at(3)))
	if !changed {
		t.Errorf("new leader: changed = false, want true")
	}
	if top3.Version <= top2.Version {
		t.Errorf("changed top: version %d, want > %d", top3.Version, top2.Version)
	}
	if got := f.top(10); got.Version != top3.Version || got.Entries[0].UserID != "a" {
		t.Errorf("Top() = version %d leader %v, want version %d leader a", got.Version, got.Entries, top3.Version)
	}
}

// TestBoardsTopVersionNeverDecreases: every change of the top gets a higher version, at
// least Redis's clock in µs (what keeps versions rising when Redis loses a board, counter
// included: TestVersionAfterRedisLoss); an unchanged top keeps its version.
func TestBoardsTopVersionNeverDecreases(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	clock := func() int64 {
		now, err := f.rdb.Time(testContext(t)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now.UnixMicro()
	}
	before := clock()
	top, changed := f.apply(nil, state("a", 10, 1, at(1)))
	if !changed || top.Version < before {
		t.Fatalf("first Apply: changed %v version %d, want a change with a version >= Redis's clock %d", changed, top.Version, before)
	}
	prev := top.Version
	for i := range 4 {
		top, changed = f.apply(nil, state("a", int64(20+i), int64(2+i), at(2+i)))
		if !changed {
			t.Fatalf("step %d: score change not reported", i)
		}
		if top.Version <= prev {
			t.Errorf("step %d: version %d, previous %d: must grow", i, top.Version, prev)
		}
		if got := f.top(10).Version; got != top.Version {
			t.Errorf("step %d: Top().Version = %d, Apply returned %d", i, got, top.Version)
		}
		prev = top.Version
	}
	// An unchanged top keeps its version.
	top, changed = f.apply(nil, state("a", 23, 5, at(5)))
	if changed || top.Version != prev {
		t.Errorf("unchanged Apply: changed %v, version %d -> %d", changed, prev, top.Version)
	}
}

func TestBoardsTopLimitAndTopN(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 4)
	var states []storage.EntryState
	for i := range 6 {
		states = append(states, state(fmt.Sprintf("u%d", i), int64(100+i), 1, at(i)))
	}
	f.apply(nil, states...)

	if top := f.top(3); len(top.Entries) != 3 || top.Entries[0].UserID != "u5" || top.Entries[2].UserID != "u3" || top.Entries[2].Rank != 3 {
		t.Errorf("Top(limit 3) = %+v, want u5, u4, u3", top.Entries)
	}
	// The cache holds topN entries only, whatever the limit.
	if top := f.top(100); len(top.Entries) != 4 || top.Entries[3].UserID != "u2" {
		t.Errorf("Top(limit 100) with topN 4 = %+v, want u5..u2", top.Entries)
	}
	// Users beyond the cached top still have their rank.
	if e := f.user("u0"); e.Rank != 6 {
		t.Errorf("User(u0).Rank = %d, want 6", e.Rank)
	}
	if f.boards.TopN() != 4 {
		t.Errorf("TopN() = %d", f.boards.TopN())
	}
}

func TestBoardsEmptyAndUnknown(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	if top := f.top(10); len(top.Entries) != 0 {
		t.Errorf("Top of an empty board = %+v, want no entries", top)
	}
	if _, err := f.boards.User(testContext(t), "global", "all_time", "nobody"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("User on an empty board: err = %v, want ErrNotFound", err)
	}
	f.apply(nil, state("a", 1, 1, at(1)))
	if _, err := f.boards.User(testContext(t), "global", "all_time", "nobody"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("unknown user: err = %v, want ErrNotFound", err)
	}
	if _, err := f.boards.User(testContext(t), "points", "all_time", "a"); !errors.Is(err, storage.ErrNotLoaded) {
		t.Errorf("user of another board, not loaded: err = %v, want ErrNotLoaded", err)
	}
	if err := f.boards.Ping(testContext(t)); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestBoardsNickNamesInTop(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	f.apply(map[string]string{"a": "Alice Ünïcode 🎮", "b": "Bob"},
		state("a", 10, 1, at(1)), state("b", 20, 1, at(2)), state("c", 5, 1, at(3)))

	want := map[string]string{"a": "Alice Ünïcode 🎮", "b": "Bob", "c": ""}
	top := f.top(10)
	if len(top.Entries) != 3 {
		t.Fatalf("Top = %+v", top.Entries)
	}
	for _, e := range top.Entries {
		if e.NickName != want[e.UserID] {
			t.Errorf("Top entry %s nick = %q, want %q", e.UserID, e.NickName, want[e.UserID])
		}
	}
}

func TestBoardsBoardsAndPeriodsAreSeparate(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	ctx := testContext(t)
	f.load("daily", "2025-03-01")
	f.load("daily", "2025-03-02")
	if _, _, err := f.boards.Apply(ctx, storage.Target{Board: "daily", Period: "2025-03-01"}, []storage.EntryState{{Board: "daily", Period: "2025-03-01", UserID: "a", Score: 5, SortKey: 5, Version: 1, ReachedAt: at(1), UpdatedAt: at(1)}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.boards.Apply(ctx, storage.Target{Board: "daily", Period: "2025-03-02"}, []storage.EntryState{{Board: "daily", Period: "2025-03-02", UserID: "b", Score: 7, SortKey: 7, Version: 1, ReachedAt: at(2), UpdatedAt: at(2)}}, nil); err != nil {
		t.Fatal(err)
	}
	top, err := f.boards.Top(ctx, "daily", "2025-03-01", 10)
	if err != nil || len(top.Entries) != 1 || top.Entries[0].UserID != "a" {
		t.Errorf("Top(daily, 2025-03-01) = %+v, %v; want only a", top.Entries, err)
	}
	if _, err := f.boards.User(ctx, "daily", "2025-03-01", "b"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("b found on the wrong period: %v", err)
	}
}

// TestBoardsApplyAllInOnePipeline: ApplyAll mirrors several board periods in one call,
// each with its own answer: a period not loaded answers ErrNotLoaded and gets nothing
// while the others are written; a script Redis lost (SCRIPT FLUSH) still runs.
func TestBoardsApplyAllInOnePipeline(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	ctx := testContext(t)
	f.load("daily", "2025-03-01")
	sent := &pipelines{}
	f.rdb.AddHook(sent)
	if err := f.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	daily := func(period, user string, score int64) storage.EntryState {
		return storage.EntryState{Board: "daily", Period: period, UserID: user, Score: score, SortKey: score, Version: 1, ReachedAt: at(1), UpdatedAt: at(1)}
	}
	res := f.boards.ApplyAll(ctx, []storage.MirrorGroup{
		{Target: global, States: []storage.EntryState{state("a", 3, 1, at(1))}},
		{Target: storage.Target{Board: "daily", Period: "2025-03-02"}, States: []storage.EntryState{daily("2025-03-02", "b", 9)}},
		{Target: storage.Target{Board: "daily", Period: "2025-03-01"}, States: []storage.EntryState{daily("2025-03-01", "c", 7)}},
	}, map[string]string{"a": "Ann"})
	if len(res) != 3 {
		t.Fatalf("%d results for 3 groups", len(res))
	}
	if p := sent.take("evalsha"); len(p) != 1 || len(p[0]) != 3 {
		t.Errorf("the scripts went in %d pipelines (%v), want one of 3", len(p), p)
	}
	for i, want := range []string{"a", "", "c"} {
		r := res[i]
		if want == "" {
			if !errors.Is(r.Err, storage.ErrNotLoaded) {
				t.Errorf("group %d (not loaded): %+v, want ErrNotLoaded", i, r)
			}
			continue
		}
		if r.Err != nil || !r.Changed || len(r.Top.Entries) != 1 || r.Top.Entries[0].UserID != want {
			t.Errorf("group %d: %+v, want a changed top of %s", i, r, want)
		}
	}
	if nick := res[0].Top.Entries[0].NickName; nick != "Ann" {
		t.Errorf("global top nick %q, want Ann", nick)
	}
	if _, err := f.boards.Top(ctx, "daily", "2025-03-02", 10); !errors.Is(err, storage.ErrNotLoaded) {
		t.Errorf("the period not loaded was written: Top = %v", err)
	}
	if e := f.user("a"); e.Score != 3 {
		t.Errorf("a = %+v, want 3", e)
	}
}

// TestBoardsApplyAllManyPeriods: more board periods than one pipeline takes all get
// their entries and their own tops.
func TestBoardsApplyAllManyPeriods(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	ctx := testContext(t)
	var groups []storage.MirrorGroup
	for i := range 150 {
		m := storage.Target{Board: fmt.Sprintf("match:m%d", i), Period: "match"}
		f.load(m.Board, m.Period)
		st := storage.EntryState{Board: m.Board, Period: m.Period, UserID: fmt.Sprint("u", i), Score: int64(i), SortKey: int64(i), Version: 1, ReachedAt: at(1), UpdatedAt: at(1)}
		groups = append(groups, storage.MirrorGroup{Target: m, States: []storage.EntryState{st}})
	}
	for i, r := range f.boards.ApplyAll(ctx, groups, nil) {
		if r.Err != nil || !r.Changed || len(r.Top.Entries) != 1 || r.Top.Entries[0].UserID != fmt.Sprint("u", i) || r.Top.Entries[0].Score != int64(i) {
			t.Fatalf("group %d: %+v, want a changed top of u%d with %d", i, r, i, i)
		}
	}
}

// TestBoardsLoadOnDemand: a period that is not in Redis answers ErrNotLoaded to writes and
// reads alike (writing nothing), until a load marks it loaded with its entries.
func TestBoardsLoadOnDemand(t *testing.T) {
	t.Parallel()
	rdb, prefix := newTestRedis(t)
	b := storage.NewBoards(rdb, prefix, 10)
	ctx := testContext(t)
	day := storage.Target{Board: "daily", Period: "2026-01-01"}
	s := storage.EntryState{Board: "daily", Period: "2026-01-01", UserID: "a", Score: 5, SortKey: 5, Version: 1, ReachedAt: at(1), UpdatedAt: at(1)}
	if _, _, err := b.Apply(ctx, day, []storage.EntryState{s}, nil); !errors.Is(err, storage.ErrNotLoaded) {
		t.Fatalf("Apply to a period not loaded: %v, want ErrNotLoaded", err)
	}
	if keys := rdb.Keys(ctx, prefix+":*").Val(); len(keys) != 0 {
		t.Fatalf("the refused Apply wrote %v", keys)
	}
	if _, err := b.Top(ctx, "daily", "2026-01-01", 10); !errors.Is(err, storage.ErrNotLoaded) {
		t.Errorf("Top of a period not loaded: %v", err)
	}
	if _, err := b.User(ctx, "daily", "2026-01-01", "a"); !errors.Is(err, storage.ErrNotLoaded) {
		t.Errorf("User of a period not loaded: %v", err)
	}
	pages := [][]storage.EntryState{{s, {Board: "daily", Period: "2026-01-01", UserID: "b", Score: 9, SortKey: 9, Version: 2, ReachedAt: at(2), UpdatedAt: at(3), Metadata: []byte(`{"car":"red"}`)}}}
	next := func() ([]storage.EntryState, map[string]string, error) {
		if len(pages) == 0 {
			return nil, nil, nil
		}
		p := pages[0]
		pages = pages[1:]
		return p, map[string]string{"b": "Bea"}, nil
	}
	top, err := b.Load(ctx, day, next)
	if err != nil || len(top.Entries) != 2 || top.Entries[0].UserID != "b" || top.Entries[0].NickName != "Bea" || string(top.Entries[0].Metadata) != `{"car":"red"}` {
		t.Fatalf("Load: %+v, %v", top, err)
	}
	e, err := b.User(ctx, "daily", "2026-01-01", "b")
	if err != nil || e.Rank != 1 || e.Score != 9 || string(e.Metadata) != `{"car":"red"}` {
		t.Fatalf("User(b) after the load: %+v, %v", e, err)
	}
	if _, err := b.User(ctx, "daily", "2026-01-01", "nobody"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("unknown user of a loaded period: %v, want ErrNotFound", err)
	}
}

// TestLoadFailsWhenRedisLosesItsPages: Redis loses its data (a restart, a flush) while a
// load on demand writes its pages: the load fails as Redis being unavailable instead of
// marking the period loaded without the pages written before the loss, whether the loss
// comes between two pages or after the last one, and when Redis comes back with an older
// copy of the keys; the next load brings every entry. A load of the same period by
// another process meanwhile does not stop it.
func TestLoadFailsWhenRedisLosesItsPages(t *testing.T) {
	t.Parallel()
	rdb, prefix := newTestRedis(t)
	b, other := storage.NewBoards(rdb, prefix, 10), storage.NewBoards(rdb, prefix, 10)
	ctx := testContext(t)
	day := storage.Target{Board: "daily", Period: "2026-01-01"}
	entry := func(i int) storage.EntryState {
		return storage.EntryState{Board: "daily", Period: "2026-01-01", UserID: fmt.Sprint("u", i), Score: int64(i), SortKey: int64(i), Version: 1, ReachedAt: at(i), UpdatedAt: at(i)}
	}
	lose := func() {
		for _, k := range rdb.Keys(ctx, prefix+":*").Val() {
			rdb.Del(ctx, k)
		}
	}
	// pages of two entries each, u1..u6; hook runs before page at (0: before the first).
	pages := func(hook func(at int)) func() ([]storage.EntryState, map[string]string, error) {
		i := 0
		return func() ([]storage.EntryState, map[string]string, error) {
			hook(i)
			if i == 3 {
				return nil, nil, nil
			}
			i++
			return []storage.EntryState{entry(2*i - 1), entry(2 * i)}, nil, nil
		}
	}
	for _, lostAt := range []int{1, 3} { // after the first page; after the last
		_, err := b.Load(ctx, day, pages(func(at int) {
			if at == lostAt {
				lose()
			}
		}))
		if !errors.Is(err, storage.ErrUnavailable) {
			t.Fatalf("Redis lost the keys after page %d of the load: %v, want ErrUnavailable", lostAt, err)
		}
		if top, err := b.Top(ctx, "daily", "2026-01-01", 10); !errors.Is(err, storage.ErrNotLoaded) {
			t.Fatalf("after a load whose pages Redis lost (after page %d): Top %+v, %v; want ErrNotLoaded", lostAt, top, err)
		}
	}
	// Redis comes back with an older copy of the keys (a restart from its append-only
	// file, a failover to a lagging replica): as they were after the first page.
	dumps := map[string]string{}
	_, err := b.Load(ctx, day, pages(func(at int) {
		switch at {
		case 1:
			for _, k := range rdb.Keys(ctx, prefix+":*").Val() {
				dumps[k] = rdb.Dump(ctx, k).Val()
			}
		case 2:
			lose()
			for k, v := range dumps {
				if err := rdb.Restore(ctx, k, 0, v).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}))
	if !errors.Is(err, storage.ErrUnavailable) || len(dumps) == 0 {
		t.Fatalf("Redis went back to its keys after page 1 of 3: %v (%d keys), want ErrUnavailable", err, len(dumps))
	}
	if top, err := b.Top(ctx, "daily", "2026-01-01", 10); !errors.Is(err, storage.ErrNotLoaded) {
		t.Fatalf("after a load whose second page Redis lost: Top %+v, %v; want ErrNotLoaded", top, err)
	}
	lose()
	// Another process's load starts while this one is under way; both complete.
	top, err := b.Load(ctx, day, pages(func(at int) {
		if at == 2 {
			if _, err := other.Load(ctx, day, pages(func(int) {})); err != nil {
				t.Errorf("the other process's load: %v", err)
			}
		}
	}))
	if err != nil || len(top.Entries) != 6 {
		t.Fatalf("a load after the losses: %d entries, %v; want all 6", len(top.Entries), err)
	}
	if e, err := b.User(ctx, "daily", "2026-01-01", "u1"); err != nil || e.Rank != 6 {
		t.Fatalf("u1, of the first page: %+v, %v", e, err)
	}
}

// TestBoardsVersionsRiseAcrossPeriods: every period of a board draws its top versions from
// one counter, so a new period's top is newer than anything an older period showed.
func TestBoardsVersionsRiseAcrossPeriods(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	ctx := testContext(t)
	var last int64
	for i, p := range []string{"2026-01-01", "2026-01-02", "2026-01-01", "2026-01-03"} {
		top := f.load("daily", p)
		if i > 0 && top.Version <= last {
			t.Fatalf("period %s loaded with version %d after %d", p, top.Version, last)
		}
		st := storage.EntryState{Board: "daily", Period: p, UserID: fmt.Sprint("u", i), Score: 1, SortKey: 1, Version: 1, ReachedAt: at(i), UpdatedAt: at(i)}
		top, changed, err := f.boards.Apply(ctx, storage.Target{Board: "daily", Period: p}, []storage.EntryState{st}, nil)
		if err != nil || !changed || top.Version <= last {
			t.Fatalf("apply to %s: version %d after %d, %v", p, top.Version, last, err)
		}
		last = top.Version
	}
}

// TestBoardsAscendingAndMetadata: entries rank by sort key (an asc board stores the
// negated value) while reads give the value; metadata follows the entry's state.
func TestBoardsAscendingAndMetadata(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	ctx := testContext(t)
	laps := storage.Target{Board: "laps", Period: "2026-W01"}
	f.load(laps.Board, laps.Period)
	lap := func(user string, ms, version int64, meta string) storage.EntryState {
		s := storage.EntryState{Board: "laps", Period: "2026-W01", UserID: user, Score: ms, SortKey: -ms, Version: version, ReachedAt: at(int(version)), UpdatedAt: at(int(version))}
		if meta != "" {
			s.Metadata = []byte(meta)
		}
		return s
	}
	if _, _, err := f.boards.Apply(ctx, laps, []storage.EntryState{lap("slow", 90000, 1, `{"car":"a"}`), lap("fast", 61000, 1, "")}, nil); err != nil {
		t.Fatal(err)
	}
	top, err := f.boards.Top(ctx, "laps", "2026-W01", 10)
	if err != nil || len(top.Entries) != 2 || top.Entries[0].UserID != "fast" || top.Entries[0].Score != 61000 || string(top.Entries[1].Metadata) != `{"car":"a"}` {
		t.Fatalf("asc top: %+v, %v", top.Entries, err)
	}
	// slow improves without metadata: the entry's metadata goes with its old state.
	if _, _, err := f.boards.Apply(ctx, laps, []storage.EntryState{lap("slow", 60000, 2, "")}, nil); err != nil {
		t.Fatal(err)
	}
	e, err := f.boards.User(ctx, "laps", "2026-W01", "slow")
	if err != nil || e.Rank != 1 || e.Score != 60000 || e.Metadata != nil {
		t.Fatalf("slow after improving: %+v, %v", e, err)
	}
	// On a board period whose entries held no metadata when the write began, one write that
	// gives an entry metadata and then a newer state without it leaves none.
	next := storage.Target{Board: "laps", Period: "2026-W02"}
	f.load(next.Board, next.Period)
	w2 := func(user string, ms, version int64, meta string) storage.EntryState {
		s := lap(user, ms, version, meta)
		s.Period = next.Period
		return s
	}
	if _, _, err := f.boards.Apply(ctx, next, []storage.EntryState{w2("fast", 61000, 1, ""), w2("slow", 90000, 1, `{"car":"b"}`), w2("slow", 80000, 2, "")}, nil); err != nil {
		t.Fatal(err)
	}
	if e, err := f.boards.User(ctx, "laps", next.Period, "slow"); err != nil || e.Score != 80000 || e.Metadata != nil {
		t.Fatalf("slow after metadata and a newer state without it in one write: %+v, %v", e, err)
	}
}

// TestBoardsKeysExpire: a write with a lifetime gives every key of the period that
// lifetime, the top (the loaded mark) a second less.
func TestBoardsKeysExpire(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	ctx := testContext(t)
	m := storage.Target{Board: "match:m1", Period: "all_time", TTL: time.Hour}
	if _, err := f.boards.Load(ctx, m, noPages); err != nil {
		t.Fatal(err)
	}
	st := storage.EntryState{Board: "match:m1", Period: "all_time", UserID: "a", Score: 3, SortKey: 3, Version: 1, ReachedAt: at(1), UpdatedAt: at(1), Metadata: []byte(`{}`)}
	if _, _, err := f.boards.Apply(ctx, m, []storage.EntryState{st}, map[string]string{"a": "A"}); err != nil {
		t.Fatal(err)
	}
	base := f.prefix + ":{match:m1}:all_time:"
	for _, k := range []string{"z", "u", "n", "m"} {
		if ttl := f.rdb.PTTL(ctx, base+k).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
			t.Errorf("%s lives %v, want about an hour", k, ttl)
		}
	}
	if top, data := f.rdb.PTTL(ctx, base+"top").Val(), f.rdb.PTTL(ctx, base+"z").Val(); top >= data {
		t.Errorf("the top lives %v, the entries %v: the top must go first", top, data)
	}
	if ttl := f.rdb.PTTL(ctx, f.prefix+":{global}:all_time:top").Val(); ttl != -1 {
		t.Errorf("an all-time board's top expires in %v", ttl)
	}
	// The board's version counter goes with its last period, and a write to a period that
	// lives shorter does not cut it short.
	ver := f.prefix + ":{match:m1}:ver"
	if ttl := f.rdb.PTTL(ctx, ver).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Errorf("the version counter lives %v, want about an hour", ttl)
	}
	short := storage.Target{Board: "match:m1", Period: "other", TTL: time.Minute}
	if _, err := f.boards.Load(ctx, short, noPages); err != nil {
		t.Fatal(err)
	}
	if ttl := f.rdb.PTTL(ctx, ver).Val(); ttl <= 59*time.Minute {
		t.Errorf("after a write to a shorter-lived period the version counter lives %v", ttl)
	}
	if ttl := f.rdb.PTTL(ctx, f.prefix+":{global}:ver").Val(); ttl != -1 {
		t.Errorf("an all-time board's version counter expires in %v", ttl)
	}
}

// TestBoardsTopRefreshedOnlyWhenTouched: a change below the top-N leaves the cached top as
// it was (same version, not recomputed); a change entering, inside or leaving the top-N
// gives it a new version.
func TestBoardsTopRefreshedOnlyWhenTouched(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 3)
	f.apply(nil, state("a", 100, 1, at(1)), state("b", 90, 1, at(2)), state("c", 80, 1, at(3)), state("d", 10, 1, at(4)), state("e", 5, 1, at(5)))
	v := f.top(3).Version
	if _, changed := f.apply(nil, state("d", 20, 2, at(6)), state("e", 6, 2, at(7))); changed {
		t.Error("changes below the top-3 changed the top")
	}
	if got := f.top(3).Version; got != v {
		t.Errorf("changes below the top-3 moved its version %d -> %d", v, got)
	}
	// Three entries or more are checked against the top once, not rank by rank.
	if _, changed := f.apply(nil, state("f", 4, 1, at(7)), state("g", 3, 1, at(7)), state("h", 2, 1, at(7))); changed {
		t.Error("three changes below the top-3 changed the top")
	}
	if got := f.top(3).Version; got != v {
		t.Errorf("three changes below the top-3 moved its version %d -> %d", v, got)
	}
	// A new nick name of a user in the top comes with a state Redis has already (a score
	// that did not improve): the top shows it.
	top, changed := f.apply(map[string]string{"b": "Bee"}, state("b", 90, 1, at(2)))
	if !changed || top.Version <= v || top.Entries[1].NickName != "Bee" {
		t.Errorf("a new nick name in the top: changed %v, version %d (was %d), entries %+v", changed, top.Version, v, top.Entries)
	}
	v = top.Version
	if _, changed := f.apply(map[string]string{"e": "Eve"}, state("e", 6, 2, at(7))); changed {
		t.Error("a new nick name below the top-3 changed the top")
	}
	for i, s := range []storage.EntryState{
		state("d", 85, 3, at(8)),  // enters the top (pushes c out)
		state("a", 101, 2, at(9)), // moves inside it
		state("d", 1, 4, at(10)),  // leaves it again
	} {
		top, changed := f.apply(nil, s)
		if !changed || top.Version <= v || len(top.Entries) != 3 {
			t.Errorf("step %d: changed %v version %d (was %d), %d entries", i, changed, top.Version, v, len(top.Entries))
		}
		v = top.Version
	}
	for i, u := range []string{"a", "b", "c", "e", "f", "g", "h", "d"} {
		if e := f.user(u); e.Rank != int64(i+1) {
			t.Errorf("%s ranks %d, want %d", u, e.Rank, i+1)
		}
	}
}

// TestBoardsTopLinesFollowEveryChange: the cached top keeps the lines of users a write did
// not touch and recomputes the others, so after any sequence of writes (values that move,
// equal values reached later, new nick names and metadata at an unchanged value) every
// entry of the top says what a read of that user says.
func TestBoardsTopLinesFollowEveryChange(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 5)
	rng := rand.New(rand.NewPCG(7, 11))
	versions, scores, reached := map[string]int64{}, map[string]int64{}, map[string]time.Time{}
	nickOf := map[string]string{} // a user read answers no nick name: the test keeps them
	nicks := []string{"", "Ann", "Bo", "Cy"}
	metas := []string{"", `{"car":"red"}`, `{"car":"blue"}`}
	for step := range 300 {
		var states []storage.EntryState
		names := map[string]string{}
		for range 1 + rng.IntN(3) {
			u := fmt.Sprintf("u%d", rng.IntN(10))
			versions[u]++
			if rng.IntN(3) > 0 || reached[u].IsZero() { // else the same member: only its nick or metadata changes
				scores[u], reached[u] = int64(rng.IntN(8)), at(step)
			}
			s := state(u, scores[u], versions[u], reached[u])
			if m := metas[rng.IntN(len(metas))]; m != "" {
				s.Metadata = []byte(m)
			}
			if n := nicks[rng.IntN(len(nicks))]; n != "" { // "": no name given, the last one stays
				names[u], nickOf[u] = n, n
			}
			states = append(states, s)
		}
		f.apply(names, states...)
		top := f.top(5)
		for _, e := range top.Entries {
			want := f.user(e.UserID)
			if e.Rank != want.Rank || e.Score != want.Score || !e.UpdatedAt.Equal(want.UpdatedAt) || e.NickName != nickOf[e.UserID] || string(e.Metadata) != string(want.Metadata) {
				t.Fatalf("step %d: top has %s as %+v, a read of the user says %+v (nick %q)", step, e.UserID, e, want, nickOf[e.UserID])
			}
		}
	}
}
