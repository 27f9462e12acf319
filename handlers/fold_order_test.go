package handlers

import (
	"bytes"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// The fold applies one entry's events of a batch in acceptance order. A user's
// commands reach a batch in outbox order (transaction id, then offset), which is not the
// order of their acceptance times: the API reads the clock in Prepare, then waits for the
// guard (a Redis round trip) and for the outbox's accept batcher, so two concurrent writes
// of one user can be committed (and forwarded) the other way round. The rules say what
// counts is the acceptance time (set ignores an older event, best moves an equal value's
// reach time back, incr keeps the newest times), so a batch holding one entry's events
// out of order must leave the entry as the same events in acceptance order do (it applied
// them in batch order; found by a review of the boards' semantics).

var foldT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func foldAt(s int) time.Time { return foldT0.Add(time.Duration(s) * time.Second) }

func orderFold() storage.FoldFunc {
	boards := map[string]configs.Board{
		"capped": {ID: "capped", Operator: configs.OpIncr, Order: configs.OrderDesc, Period: configs.PeriodAllTime, MinValue: 0, MaxValue: 10, MaxDelta: 10},
		"points": {ID: "points", Operator: configs.OpIncr, Order: configs.OrderDesc, Period: configs.PeriodAllTime, MinValue: 0, MaxValue: configs.MaxExactScore, MaxDelta: 1000},
		"laps":   {ID: "laps", Operator: configs.OpBest, Order: configs.OrderAsc, Period: configs.PeriodAllTime, MinValue: 1, MaxValue: configs.MaxExactScore},
	}
	return FoldWith(func(id string) (configs.Board, bool) { b, ok := boards[id]; return b, ok })
}

func orderEvent(id, board, op string, v int64, at time.Time, meta string) storage.ScoreEvent {
	e := storage.ScoreEvent{Op: op, EventID: id, Board: board, Period: configs.PeriodAllTime, UserID: "u1", Value: v, OccurredAt: at}
	if meta != "" {
		e.Metadata = []byte(meta)
	}
	return e
}

func orderCurrent(board string, score int64, at time.Time) map[storage.EntryKey]storage.EntryState {
	k := storage.EntryKey{Board: board, Period: configs.PeriodAllTime, UserID: "u1"}
	return map[storage.EntryKey]storage.EntryState{k: {Board: board, Period: configs.PeriodAllTime, UserID: "u1",
		Score: score, SortKey: score, Version: 3, ReachedAt: at, UpdatedAt: at}}
}

// orderFoldOne folds events over a copy of cur and returns the one entry's state.
func orderFoldOne(t *testing.T, cur map[storage.EntryKey]storage.EntryState, events ...storage.ScoreEvent) storage.EntryState {
	t.Helper()
	c := map[storage.EntryKey]storage.EntryState{}
	for k, v := range cur {
		c[k] = v
	}
	out, err := orderFold()(c, events)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 {
		t.Fatalf("fold gave %d states, want 1: %+v", len(out), out)
	}
	return out[0]
}

func sameState(a, b storage.EntryState) bool {
	return a.Score == b.Score && a.Removed == b.Removed && a.ReachedAt.Equal(b.ReachedAt) && a.UpdatedAt.Equal(b.UpdatedAt) && bytes.Equal(a.Metadata, b.Metadata)
}

// An incr board capped at 10; the entry holds 5. Two +5 increments accepted at t1 and t2
// are applied in one batch, t2's first. In acceptance order the entry reached 10 at t1
// (t2's increment stopped at the bound and keeps the reach time, as the rules say); in
// batch order it reached it at t2, so a rival who reached 10 between t1 and t2 wrongly
// ranks above it.
func TestFoldIncrAtBoundReachTimeFollowsAcceptanceOrder(t *testing.T) {
	cur := orderCurrent("capped", 5, foldAt(0))
	e1 := orderEvent("e1", "capped", "", 5, foldAt(1), "")
	e2 := orderEvent("e2", "capped", "", 5, foldAt(2), "")
	inOrder := orderFoldOne(t, cur, e1, e2)
	reversed := orderFoldOne(t, cur, e2, e1)
	if !sameState(inOrder, reversed) {
		t.Errorf("same increments, batch order t2,t1 -> score %d reached %s; acceptance order -> score %d reached %s (want the same: ties rank by when the value was reached)",
			reversed.Score, reversed.ReachedAt.Format(time.RFC3339), inOrder.Score, inOrder.ReachedAt.Format(time.RFC3339))
	}
}

// Two increments with metadata, t2's applied first: the entry ends with updated_at t2 but
// the metadata of t1's event, which is not the event that last changed it.
func TestFoldIncrMetadataFollowsAcceptanceOrder(t *testing.T) {
	cur := orderCurrent("points", 0, foldAt(0))
	e1 := orderEvent("e1", "points", "", 1, foldAt(1), `{"m":"old"}`)
	e2 := orderEvent("e2", "points", "", 1, foldAt(2), `{"m":"new"}`)
	inOrder := orderFoldOne(t, cur, e1, e2)
	reversed := orderFoldOne(t, cur, e2, e1)
	if !sameState(inOrder, reversed) {
		t.Errorf("batch order t2,t1 -> metadata %s updated %s; acceptance order -> metadata %s updated %s",
			reversed.Metadata, reversed.UpdatedAt.Format(time.RFC3339), inOrder.Metadata, inOrder.UpdatedAt.Format(time.RFC3339))
	}
}

// An admin adjusts the entry (500) to 0 at t5; an increment of 100 the user made at t3
// lands after it in the same batch. In acceptance order the adjustment has the last word
// (0); in batch order the increment is added on top of the admin's value (100).
func TestFoldAdjustThenOlderIncrementInOneBatch(t *testing.T) {
	cur := orderCurrent("points", 500, foldAt(0))
	inc := orderEvent("inc", "points", "", 100, foldAt(3), "")
	adj := orderEvent("adj", "points", storage.OpAdjust, 0, foldAt(5), "")
	inOrder := orderFoldOne(t, cur, inc, adj)
	reversed := orderFoldOne(t, cur, adj, inc)
	if !sameState(inOrder, reversed) {
		t.Errorf("adjust(t5) then increment(t3) in one batch -> score %d; acceptance order -> score %d", reversed.Score, inOrder.Score)
	}
}

// An admin removes the entry at t5; a lap time the user set at t3 lands after it in the
// same batch: in batch order the entry is created again (with the older lap), in
// acceptance order it stays removed.
func TestFoldRemoveThenOlderBestInOneBatch(t *testing.T) {
	cur := orderCurrent("laps", 60, foldAt(0))
	best := orderEvent("lap", "laps", "", 50, foldAt(3), "")
	rm := orderEvent("rm", "laps", storage.OpRemove, 0, foldAt(5), "")
	inOrder := orderFoldOne(t, cur, best, rm)
	reversed := orderFoldOne(t, cur, rm, best)
	if !sameState(inOrder, reversed) {
		t.Errorf("remove(t5) then best(t3) in one batch -> removed=%v score %d; acceptance order -> removed=%v", reversed.Removed, reversed.Score, inOrder.Removed)
	}
}

// Across batches: the entry was last changed at t2 by an increment with metadata "new";
// an increment accepted at t1 with metadata "old" is applied in a later batch. The entry
// keeps updated_at t2 (incr keeps the newest times) but takes the older event's metadata,
// so reads show metadata of an event that is not the one that last changed the entry.
func TestFoldLateIncrementKeepsNewerMetadata(t *testing.T) {
	cur := orderCurrent("points", 7, foldAt(2))
	for k, s := range cur {
		s.Metadata = []byte(`{"m":"new"}`)
		cur[k] = s
	}
	late := orderEvent("late", "points", "", 1, foldAt(1), `{"m":"old"}`)
	got := orderFoldOne(t, cur, late)
	if string(got.Metadata) != `{"m":"new"}` || !got.UpdatedAt.Equal(foldAt(2)) {
		t.Errorf("late increment (t1) over an entry changed at t2: metadata %s updated %s, want metadata {\"m\":\"new\"} updated %s",
			got.Metadata, got.UpdatedAt.Format(time.RFC3339), foldAt(2).Format(time.RFC3339))
	}
}
