package storage_test

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/handlers"
	"github.com/openleaderboard/leaderboard/storage"
)

// t0 is a base time with microsecond precision, as PostgreSQL keeps it.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func at(seconds int) time.Time { return t0.Add(time.Duration(seconds) * time.Second) }

func bestEvent(id, user string, value int64, occurred time.Time) storage.ScoreEvent {
	return storage.ScoreEvent{EventID: id, Board: "global", Period: "all_time", Operator: "best", UserID: user, Value: value, OccurredAt: occurred}
}

func incrEvent(id, user string, value int64, occurred time.Time) storage.ScoreEvent {
	return storage.ScoreEvent{EventID: id, Board: "points", Period: "all_time", Operator: "incr", UserID: user, Value: value, OccurredAt: occurred}
}

// testFold applies events with the rules of global (best) and of incr boards.
var testFold = func() storage.FoldFunc {
	boards := map[string]configs.Board{
		"global": {ID: "global", Operator: configs.OpBest, Order: configs.OrderDesc, Period: configs.PeriodAllTime, MaxValue: configs.MaxExactScore},
	}
	for _, id := range []string{"points", "match:m1", "daily", "season"} {
		boards[id] = configs.Board{ID: id, Operator: configs.OpIncr, Order: configs.OrderDesc, MaxValue: math.MaxInt64}
	}
	return handlers.FoldWith(func(id string) (configs.Board, bool) { b, ok := boards[id]; return b, ok })
}()

func mustApply(t *testing.T, p *storage.Projection, events ...storage.ScoreEvent) storage.AppliedBatch {
	t.Helper()
	out, err := p.Apply(testContext(t), events, testFold)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return out
}

// entryOf finds the state of one entry in a batch result.
func entryOf(t *testing.T, b storage.AppliedBatch, board, user string) storage.EntryState {
	t.Helper()
	var found []storage.EntryState
	for _, e := range b.Entries {
		if e.Board == board && e.UserID == user {
			found = append(found, e)
		}
	}
	if len(found) != 1 {
		t.Fatalf("batch has %d entries for %s/%s, want 1: %+v", len(found), board, user, b.Entries)
	}
	return found[0]
}

func checkState(t *testing.T, got storage.EntryState, score, version int64, reached time.Time) {
	t.Helper()
	if got.Score != score || got.Version != version || !got.ReachedAt.Equal(reached) {
		t.Errorf("%s/%s = score %d version %d reached %s, want score %d version %d reached %s",
			got.Board, got.UserID, got.Score, got.Version, got.ReachedAt.UTC().Format(time.RFC3339Nano),
			score, version, reached.UTC().Format(time.RFC3339Nano))
	}
}

func historyRows(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := pool.Query(testContext(t), `SELECT event_id, board_id, period, count(*) FROM score_history GROUP BY 1, 2, 3`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id, board, period string
		var n int
		if err := rows.Scan(&id, &board, &period, &n); err != nil {
			t.Fatal(err)
		}
		out[id+"|"+board+"|"+period] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestProjectionApplyNewEvent(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	ev := bestEvent("ev-1", "alice", 120, at(1))
	ev.NickName = "Alice"

	got := mustApply(t, p, ev)
	if got.NewEvents != 1 {
		t.Errorf("NewEvents = %d, want 1", got.NewEvents)
	}
	s := entryOf(t, got, "global", "alice")
	checkState(t, s, 120, 1, at(1))
	if s.Period != "all_time" {
		t.Errorf("period = %q", s.Period)
	}
	if got.NickNames["alice"] != "Alice" {
		t.Errorf("NickNames = %v, want alice: Alice", got.NickNames)
	}
	requests := storage.NewRequestLog(pool)
	applied, err := requests.IsApplied(testContext(t), "alice", "ev-1")
	if err != nil || !applied {
		t.Errorf("IsApplied(alice, ev-1) = %v, %v; want true", applied, err)
	}
	if applied, err = requests.IsApplied(testContext(t), "bob", "ev-1"); err != nil || applied {
		t.Errorf("IsApplied(bob, alice's ev-1) = %v, %v; want false", applied, err)
	}
	applied, err = requests.IsApplied(testContext(t), "alice", "ev-unknown")
	if err != nil || applied {
		t.Errorf("IsApplied(ev-unknown) = %v, %v; want false", applied, err)
	}
	mustApply(t, p, bestEvent("ev-2", "alice", 130, at(2)))
	a, applied, err := requests.AppliedIn(testContext(t), "alice", "ev-1", "global")
	if err != nil || !applied || a.Version != 2 || a.Period != "all_time" || a.BeforeAcceptance {
		t.Errorf("AppliedIn(alice, ev-1, global) after a second event = %+v, %v, %v; want all_time, the entry's version now (2), applied after no acceptance", a, applied, err)
	}
	if _, applied, err = requests.AppliedIn(testContext(t), "alice", "ev-unknown", "global"); err != nil || applied {
		t.Errorf("AppliedIn(ev-unknown) = %v, %v; want not applied", applied, err)
	}
	if _, applied, err = requests.AppliedIn(testContext(t), "alice", "ev-1", "points"); err != nil || applied {
		t.Errorf("AppliedIn on a board the event was not applied to = %v, %v; want not applied", applied, err)
	}
	var nick string
	if err := pool.QueryRow(testContext(t), `SELECT nick_name FROM users WHERE user_id = 'alice'`).Scan(&nick); err != nil || nick != "Alice" {
		t.Errorf("users.nick_name = %q, %v; want Alice", nick, err)
	}
}

func TestProjectionApplySameEventTwiceInOneBatch(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	ev := incrEvent("ev-dup", "bob", 7, at(1))

	got := mustApply(t, p, ev, ev, ev)
	if got.NewEvents != 1 {
		t.Errorf("NewEvents = %d, want 1 for one event id delivered three times", got.NewEvents)
	}
	checkState(t, entryOf(t, got, "points", "bob"), 7, 1, at(1))
	if h := historyRows(t, pool); len(h) != 1 || h["ev-dup|points|all_time"] != 1 {
		t.Errorf("score_history = %v, want exactly one row for ev-dup", h)
	}
}

func TestProjectionApplyRedeliveryInLaterBatch(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	e1 := incrEvent("ev-1", "carol", 5, at(1))
	e2 := incrEvent("ev-2", "carol", 3, at(2))

	first := mustApply(t, p, e1)
	checkState(t, entryOf(t, first, "points", "carol"), 5, 1, at(1))

	again := mustApply(t, p, e1)
	if again.NewEvents != 0 {
		t.Errorf("redelivery: NewEvents = %d, want 0", again.NewEvents)
	}
	// The redelivered event still names its entry, with the current state, so Redis can be repaired.
	checkState(t, entryOf(t, again, "points", "carol"), 5, 1, at(1))

	mixed := mustApply(t, p, e1, e2)
	if mixed.NewEvents != 1 {
		t.Errorf("redelivery + new event: NewEvents = %d, want 1", mixed.NewEvents)
	}
	checkState(t, entryOf(t, mixed, "points", "carol"), 8, 2, at(2))

	if h := historyRows(t, pool); len(h) != 2 || h["ev-1|points|all_time"] != 1 || h["ev-2|points|all_time"] != 1 {
		t.Errorf("score_history = %v, want one row per event", h)
	}
}

func TestProjectionRedeliveredEntriesCarryCurrentState(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	old := bestEvent("ev-old", "dave", 100, at(1))
	mustApply(t, p, old)
	mustApply(t, p, bestEvent("ev-new", "dave", 250, at(5)))
	mustApply(t, p, bestEvent("ev-other", "erin", 90, at(6)))

	got := mustApply(t, p, old)
	if got.NewEvents != 0 {
		t.Errorf("NewEvents = %d, want 0", got.NewEvents)
	}
	if len(got.Entries) != 1 {
		t.Errorf("Entries = %+v, want only the entry the batch names", got.Entries)
	}
	checkState(t, entryOf(t, got, "global", "dave"), 250, 2, at(5))
}

func TestProjectionBestOperator(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)

	checkState(t, entryOf(t, mustApply(t, p, bestEvent("b1", "u", 100, at(10))), "global", "u"), 100, 1, at(10))
	// A lower score changes nothing.
	checkState(t, entryOf(t, mustApply(t, p, bestEvent("b2", "u", 50, at(20))), "global", "u"), 100, 1, at(10))
	// A higher score replaces it, with its own time.
	checkState(t, entryOf(t, mustApply(t, p, bestEvent("b3", "u", 150, at(30))), "global", "u"), 150, 2, at(30))
	// An equal score reached later keeps the earlier time (ties rank who reached it first).
	checkState(t, entryOf(t, mustApply(t, p, bestEvent("b4", "u", 150, at(40))), "global", "u"), 150, 2, at(30))

	// Within one batch: the max wins, and on equal scores the earliest time.
	got := mustApply(t, p,
		bestEvent("c1", "v", 70, at(50)),
		bestEvent("c2", "v", 90, at(60)),
		bestEvent("c3", "v", 90, at(55)),
		bestEvent("c4", "v", 80, at(52)),
	)
	if got.NewEvents != 4 {
		t.Errorf("NewEvents = %d, want 4", got.NewEvents)
	}
	checkState(t, entryOf(t, got, "global", "v"), 90, 1, at(55))
}

// Kafka partitions and retries reorder events: an equal best score that was reached
// earlier but applied later must still move the entry's reached_at back, or ties rank
// differently depending on delivery order.
func TestProjectionBestOperatorEqualScoreArrivingLateKeepsEarliestTime(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)

	mustApply(t, p, bestEvent("late", "w", 500, at(100)))
	got := mustApply(t, p, bestEvent("early", "w", 500, at(10)))
	s := entryOf(t, got, "global", "w")
	if s.Score != 500 || !s.ReachedAt.Equal(at(10)) {
		t.Errorf("after an equal score reached earlier: score %d reached %s, want 500 reached %s (same as applying the events in one batch)",
			s.Score, s.ReachedAt.UTC().Format(time.RFC3339), at(10).Format(time.RFC3339))
	}
	if s.Version < 2 {
		t.Errorf("version = %d: a changed reached_at must bump the version, or the Redis mirror ignores it", s.Version)
	}
}

func TestProjectionIncrOperatorSums(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)

	got := mustApply(t, p, incrEvent("i1", "x", 10, at(1)), incrEvent("i2", "x", 5, at(2)), incrEvent("i3", "y", 1, at(3)))
	if got.NewEvents != 3 {
		t.Errorf("NewEvents = %d, want 3", got.NewEvents)
	}
	checkState(t, entryOf(t, got, "points", "x"), 15, 1, at(2))
	checkState(t, entryOf(t, got, "points", "y"), 1, 1, at(3))

	got = mustApply(t, p, incrEvent("i4", "x", 20, at(4)))
	checkState(t, entryOf(t, got, "points", "x"), 35, 2, at(4))
}

// One event id may fan out to several boards (a match point counts on the match, daily
// and season boards): each board applies it once.
func TestProjectionOneEventOnSeveralBoards(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	fan := func() []storage.ScoreEvent {
		var es []storage.ScoreEvent
		for _, b := range [][2]string{{"match:m1", "match"}, {"daily", "2025-03-01"}, {"season", "s1"}} {
			es = append(es, storage.ScoreEvent{EventID: "pt-1", Board: b[0], Period: b[1], Operator: "incr", UserID: "z", Value: 3, OccurredAt: at(1)})
		}
		return es
	}
	mustApply(t, p, fan()...)
	got := mustApply(t, p, fan()...)
	if got.NewEvents != 0 {
		t.Errorf("redelivered fan-out: NewEvents = %d, want 0", got.NewEvents)
	}
	for _, board := range []string{"match:m1", "daily", "season"} {
		checkState(t, entryOf(t, got, board, "z"), 3, 1, at(1))
	}
	h := historyRows(t, pool)
	if len(h) != 3 || h["pt-1|match:m1|match"] != 1 || h["pt-1|daily|2025-03-01"] != 1 || h["pt-1|season|s1"] != 1 {
		t.Errorf("score_history = %v, want one row per (event_id, board, period)", h)
	}
}

func TestProjectionConcurrentRedeliveriesApplyOnce(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	const workers = 6
	var wg sync.WaitGroup
	results := make([]storage.AppliedBatch, workers)
	errs := make([]error, workers)
	ctx := testContext(t)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every worker carries the shared event and one of its own.
			results[i], errs[i] = p.Apply(ctx, []storage.ScoreEvent{
				incrEvent("shared", "q", 100, at(1)),
				incrEvent(fmt.Sprintf("own-%d", i), "q", 1, at(2)),
			}, testFold)
		}()
	}
	wg.Wait()
	total := 0
	for i := range workers {
		if errs[i] != nil {
			t.Fatalf("worker %d: %v", i, errs[i])
		}
		total += results[i].NewEvents
	}
	if total != workers+1 {
		t.Errorf("sum of NewEvents = %d, want %d", total, workers+1)
	}
	got := mustApply(t, p, incrEvent("shared", "q", 100, at(1)))
	if s := entryOf(t, got, "points", "q"); s.Score != 100+workers {
		t.Errorf("score = %d, want %d (shared event applied once)", s.Score, 100+workers)
	}
	if h := historyRows(t, pool); h["shared|points|all_time"] != 1 || len(h) != workers+1 {
		t.Errorf("score_history = %v", h)
	}
}

func TestProjectionFoldErrorRollsBack(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	failing := func(map[storage.EntryKey]storage.EntryState, []storage.ScoreEvent) ([]storage.EntryState, error) {
		return nil, errors.New("fold failed")
	}
	if _, err := p.Apply(testContext(t), []storage.ScoreEvent{bestEvent("ev-1", "u", 1, at(1))}, failing); err == nil {
		t.Fatal("Apply with a failing fold succeeded")
	}
	if h := historyRows(t, pool); len(h) != 0 {
		t.Errorf("score_history = %v after a failed batch, want empty: the event must apply on its retry", h)
	}
}

// TestProjectionRejectedDataIsMarked: data PostgreSQL refuses (a NUL in a text column) is
// marked ErrRejected, which retrying can never change; an unreachable database is not.
func TestProjectionRejectedDataIsMarked(t *testing.T) {
	t.Parallel()
	p := storage.NewProjection(newMigratedPool(t, 1))
	nul := bestEvent("ev-nul", "nul", 1, at(1))
	nul.Period = "all\x00time"
	nulUser := bestEvent("ev-nul-2", "n\x00l", 1, at(1))
	for name, ev := range map[string]storage.ScoreEvent{
		"NUL in the period":  nul,
		"NUL in the user id": nulUser,
	} {
		_, err := p.Apply(testContext(t), []storage.ScoreEvent{ev}, testFold)
		if !errors.Is(err, storage.ErrRejected) || errors.Is(err, storage.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrRejected", name, err)
		}
	}
}

// TestProjectionSyncWithEventsNamesEachEntryOnce: a batch holding a new event of a user and
// a sync of the same user returns every entry of the user once, the changed one in its new
// state, and applies the event once.
func TestProjectionSyncWithEventsNamesEachEntryOnce(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	mustApply(t, p, bestEvent("ev-1", "u", 10, at(1)), incrEvent("ev-2", "u", 4, at(2)), bestEvent("ev-3", "other", 7, at(3)))
	sync := storage.ScoreEvent{Op: storage.OpSync, EventID: "sync-1", UserID: "u", OccurredAt: at(4)}
	got := mustApply(t, p, incrEvent("ev-4", "u", 5, at(5)), sync)
	if got.NewEvents != 1 || !got.Fresh[0] || !got.Fresh[1] {
		t.Errorf("NewEvents = %d, Fresh = %v; want 1, [true true]", got.NewEvents, got.Fresh)
	}
	if len(got.Entries) != 2 {
		t.Fatalf("entries = %+v, want the two entries of u, once each", got.Entries)
	}
	checkState(t, entryOf(t, got, "points", "u"), 9, 2, at(5))
	checkState(t, entryOf(t, got, "global", "u"), 10, 1, at(1))
	// A redelivery of the same batch changes nothing and still names both entries.
	again := mustApply(t, p, incrEvent("ev-4", "u", 5, at(5)), sync)
	if again.NewEvents != 0 || len(again.Entries) != 2 {
		t.Errorf("redelivered: NewEvents = %d, entries %+v; want 0 and both entries of u", again.NewEvents, again.Entries)
	}
	checkState(t, entryOf(t, again, "points", "u"), 9, 2, at(5))
}

// TestProjectionUnreadableAnswerRollsBack: when an answer of the batch's last trip cannot
// be read (here the synced user's entry holds a time Go cannot represent), the batch is not
// committed, so its retry still finds its events new. Queued in that trip, COMMIT would
// run on the server anyway: the retry would see the events as redeliveries and lose their
// change notifications.
func TestProjectionUnreadableAnswerRollsBack(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	mustApply(t, p, bestEvent("ev-1", "bad", 10, at(1)))
	if _, err := pool.Exec(testContext(t), `UPDATE board_entries SET updated_at = 'infinity' WHERE user_id = 'bad'`); err != nil {
		t.Fatal(err)
	}
	sync := storage.ScoreEvent{Op: storage.OpSync, EventID: "sync-1", UserID: "bad", OccurredAt: at(2)}
	batch := []storage.ScoreEvent{bestEvent("ev-2", "good", 7, at(2)), sync}
	if _, err := p.Apply(testContext(t), batch, testFold); err == nil {
		t.Fatal("Apply succeeded though the synced entry cannot be read")
	}
	if h := historyRows(t, pool); h["ev-2|global|all_time"] != 0 {
		t.Fatalf("score_history = %v after a failed batch: it was committed", h)
	}
	if _, err := pool.Exec(testContext(t), `UPDATE board_entries SET updated_at = reached_at WHERE user_id = 'bad'`); err != nil {
		t.Fatal(err)
	}
	got := mustApply(t, p, batch...)
	if got.NewEvents != 1 || !got.Fresh[0] {
		t.Fatalf("retry: NewEvents = %d, Fresh = %v; want the event new", got.NewEvents, got.Fresh)
	}
	checkState(t, entryOf(t, got, "global", "good"), 7, 1, at(2))
}

// TestProjectionUpdatesOnlyItsOwnEntries applies an event to an entry that exists beside the
// same user's entries of another period and another board, and another user's of the same
// period: only that entry changes (existing entries are updated in place, by their whole key).
func TestProjectionUpdatesOnlyItsOwnEntries(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	day := func(id, user, period string, value int64) storage.ScoreEvent {
		return storage.ScoreEvent{EventID: id, Board: "daily", Period: period, Operator: "incr", UserID: user, Value: value, OccurredAt: at(1)}
	}
	mustApply(t, p, day("e1", "alice", "2026-11-24", 5), day("e2", "alice", "2026-11-25", 7), day("e3", "bob", "2026-11-25", 11), incrEvent("e4", "alice", 13, at(1)))
	got := mustApply(t, p, day("e5", "alice", "2026-11-25", 100))
	if len(got.Entries) != 1 {
		t.Fatalf("second batch returned %d entries, want alice's of 2026-11-25: %+v", len(got.Entries), got.Entries)
	}
	want := map[string][2]int64{ // board/period/user: score, version
		"daily/2026-11-24/alice": {5, 1}, "daily/2026-11-25/alice": {107, 2}, "daily/2026-11-25/bob": {11, 1}, "points/all_time/alice": {13, 1},
	}
	rows, err := pool.Query(testContext(t), `SELECT board_id || '/' || period || '/' || user_id, score, version FROM board_entries`)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var key string
		var score, version int64
		if err := rows.Scan(&key, &score, &version); err != nil {
			t.Fatal(err)
		}
		seen++
		if w, ok := want[key]; !ok || w != [2]int64{score, version} {
			t.Errorf("%s: score %d version %d, want %v (present %v)", key, score, version, w, ok)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(want) {
		t.Errorf("%d entries, want %d", seen, len(want))
	}
}
