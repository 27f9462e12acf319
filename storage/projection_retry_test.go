package storage_test

import (
	"testing"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestProjectionOneEventIDOfTwoCommandsInOneBatchAppliesOnce: queueRecordHistory now skips
// an event whose user's event id the history holds on any board period (a retry sent
// after its event id left the request log comes for a later day), but the check reads the
// history as it was before the batch's own insert: a batch holding the command and such a
// retry (the projector catching up on a backlog older than the event-id retention, or a
// requeued dead letter of it) inserts both, and the same event id is applied twice, on
// two days. Found by a review.
func TestProjectionOneEventIDOfTwoCommandsInOneBatchAppliesOnce(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	first := storage.ScoreEvent{EventID: "late", Board: "daily", Period: "2025-03-01", Operator: "incr", UserID: "lr", Value: 5, OccurredAt: at(1)}
	retry := first
	retry.Period, retry.OccurredAt = "2025-03-02", at(86400)

	got := mustApply(t, p, first, retry)
	if got.NewEvents != 1 {
		t.Errorf("NewEvents = %d, want 1: one event id of user lr, its retry on a later day in the same batch", got.NewEvents)
	}
	if h := historyRows(t, pool); len(h) != 1 {
		t.Errorf("score_history = %v, want the event id once", h)
	}

	// A match point is one command on three boards (one time): all three apply, and its
	// later retry in the same batch none.
	point := []storage.ScoreEvent{
		{EventID: "pt", Board: "match:m1", Period: "all_time", Operator: "incr", UserID: "lr", Value: 2, OccurredAt: at(5)},
		{EventID: "pt", Board: "daily", Period: "2025-03-01", Operator: "incr", UserID: "lr", Value: 2, OccurredAt: at(5)},
		{EventID: "pt", Board: "season", Period: "S1", Operator: "incr", UserID: "lr", Value: 2, OccurredAt: at(5)},
	}
	again := []storage.ScoreEvent{point[0], point[1], point[2]}
	for i := range again {
		again[i].OccurredAt = at(90000)
	}
	again[1].Period = "2025-03-02"
	if got := mustApply(t, p, append(point, again...)...); got.NewEvents != 3 {
		t.Errorf("a match point and its later retry in one batch: NewEvents = %d, want 3 (the point's three boards)", got.NewEvents)
	}
}
