package handlers

import (
	"bytes"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// An entry's metadata is the JSON object of the event that last changed it, by the
// events' times, as its updated_at is: an increment accepted before the entry's last
// change but applied after it (two writes of one user can commit the other way round from
// how they were accepted: each takes its time, then waits for the guard and the group
// commit) adds its points and leaves the newer metadata (it replaced it; found by a
// review of the boards' semantics).

var foldT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func foldAt(s int) time.Time { return foldT0.Add(time.Duration(s) * time.Second) }

func orderFold() storage.FoldFunc {
	boards := map[string]configs.Board{
		"capped": {ID: "capped", Operator: configs.OpIncr, Order: configs.OrderDesc, Period: configs.PeriodAllTime, MinValue: 0, MaxValue: 10, MaxDelta: 10},
		"points": {ID: "points", Operator: configs.OpIncr, Order: configs.OrderDesc, Period: configs.PeriodAllTime, MinValue: 0, MaxValue: configs.MaxExactScore, MaxDelta: 1000},
		"laps":   {ID: "laps", Operator: configs.OpBest, Order: configs.OrderAsc, Period: configs.PeriodAllTime, MinValue: 1, MaxValue: configs.MaxExactScore},
		"latest": {ID: "latest", Operator: configs.OpSet, Order: configs.OrderDesc, Period: configs.PeriodAllTime, MinValue: 0, MaxValue: 1000},
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

// Two increments with metadata, t2's applied first (after a partition-count change, one
// user's commands can share a batch): either way the entry ends with updated_at t2 and
// t2's metadata (it took t1's, the event applied last).
func TestFoldIncrMetadataIsTheNewestEvents(t *testing.T) {
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

// Across batches: the entry was last changed at t2 by an increment with metadata "new";
// an increment accepted at t1 with metadata "old" is applied in a later batch. The entry
// keeps updated_at t2 (incr keeps the newest times) and its metadata "new".
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

// A set board takes the user's next command, value and metadata, though the API accepted
// it before the entry's last change (another process's clock, or a commit that waited);
// the update time does not go back. A requeued dead letter accepted before the entry's
// last change changes nothing; one accepted after it applies.
func TestFoldSetTakesTheNextCommand(t *testing.T) {
	cur := orderCurrent("latest", 100, foldAt(2))
	got := orderFoldOne(t, cur, orderEvent("next", "latest", "", 3, foldAt(1), `{"m":"next"}`))
	if got.Score != 3 || string(got.Metadata) != `{"m":"next"}` || !got.UpdatedAt.Equal(foldAt(2)) {
		t.Errorf("the next set, accepted at t1 over an entry changed at t2: %d %s updated %s, want 3 {\"m\":\"next\"} updated %s",
			got.Score, got.Metadata, got.UpdatedAt.Format(time.RFC3339), foldAt(2).Format(time.RFC3339))
	}
	old := orderEvent("old", "latest", "", 3, foldAt(1), "")
	old.Requeued = true
	if out, err := orderFold()(cur, []storage.ScoreEvent{old}); err != nil || len(out) != 0 {
		t.Errorf("a requeued set accepted before the entry's last change: %+v %v, want no change", out, err)
	}
	late := orderEvent("late", "latest", "", 4, foldAt(3), "")
	late.Requeued = true
	if got := orderFoldOne(t, cur, late); got.Score != 4 || !got.UpdatedAt.Equal(foldAt(3)) {
		t.Errorf("a requeued set accepted after the entry's last change: %+v, want 4 at t3", got)
	}
}

// An admin's adjustment accepted before the entry's last change and committed after it
// sets the value; the update time does not go back.
func TestFoldLateAdjustmentKeepsTheUpdateTime(t *testing.T) {
	cur := orderCurrent("points", 7, foldAt(2))
	got := orderFoldOne(t, cur, orderEvent("adj", "points", storage.OpAdjust, 50, foldAt(1), ""))
	if got.Score != 50 || !got.UpdatedAt.Equal(foldAt(2)) {
		t.Errorf("an adjustment accepted at t1 over an entry changed at t2: %d updated %s, want 50 updated %s",
			got.Score, got.UpdatedAt.Format(time.RFC3339), foldAt(2).Format(time.RFC3339))
	}
}

// The update time never goes back: a better best value, the same one reached earlier, or
// a removal, accepted before the entry's last change and committed after it. The better
// value brings its metadata with it.
func TestFoldUpdateTimeNeverGoesBack(t *testing.T) {
	cur := orderCurrent("laps", 61, foldAt(2))
	got := orderFoldOne(t, cur, orderEvent("late-better", "laps", "", 60, foldAt(1), `{"car":"red"}`))
	if got.Score != 60 || !got.ReachedAt.Equal(foldAt(1)) || !got.UpdatedAt.Equal(foldAt(2)) || string(got.Metadata) != `{"car":"red"}` {
		t.Errorf("best: a better lap accepted at t1 over an entry changed at t2: %+v, want 60 reached t1, updated t2, its metadata", got)
	}
	got = orderFoldOne(t, cur, orderEvent("late-equal", "laps", "", 61, foldAt(1), ""))
	if !got.ReachedAt.Equal(foldAt(1)) || !got.UpdatedAt.Equal(foldAt(2)) {
		t.Errorf("best: the same lap reached earlier: %+v, want reached t1, updated t2", got)
	}
	got = orderFoldOne(t, orderCurrent("latest", 5, foldAt(2)), orderEvent("rm", "latest", storage.OpRemove, 0, foldAt(1), ""))
	if !got.Removed || !got.UpdatedAt.Equal(foldAt(2)) {
		t.Errorf("a removal accepted at t1 over an entry changed at t2: %+v, want removed, updated t2", got)
	}
}
