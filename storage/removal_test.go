package storage_test

import (
	"errors"
	"testing"

	"github.com/openleaderboard/leaderboard/storage"
)

// mirrorBatch mirrors a batch's entries on global into Redis as the projector does.
func mirrorBatch(t *testing.T, b *storage.Boards, applied storage.AppliedBatch) {
	t.Helper()
	if len(applied.Entries) == 0 {
		return // the projector sends nothing to Redis
	}
	if _, _, err := b.Apply(testContext(t), global, applied.Entries, applied.NickNames); err != nil {
		t.Fatal(err)
	}
}

func removeEvent(id, user string) storage.ScoreEvent {
	e := bestEvent(id, user, 0, at(2))
	e.Op, e.Operator = storage.OpRemove, storage.OpRemove
	return e
}

// TestRedeliveredRemovalReachesRedis: an admin's removal commits in PostgreSQL (the row is
// deleted) and its Redis call fails; the redelivered batch finds the event applied and the
// row gone, and must still delete the entry from Redis. The user's next score must show,
// although Redis held the removed entry until the redelivery: versions keep rising across
// the removal.
func TestRedeliveredRemovalReachesRedis(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	rdb, prefix := newTestRedis(t)
	ctx := testContext(t)
	p := storage.NewProjection(pool)
	boards := storage.NewBoards(rdb, prefix, 10)
	ranks := storage.NewRanks(pool)
	if _, err := boards.Reload(ctx, ranks, global); err != nil {
		t.Fatal(err)
	}
	mirrorBatch(t, boards, mustApply(t, p, bestEvent("ev-1", "alice", 100, at(1)), bestEvent("ev-b", "bob", 90, at(1))))
	mirrorBatch(t, boards, mustApply(t, p, bestEvent("ev-1b", "alice", 120, at(1))))

	rm := removeEvent("ev-2", "alice")
	if first := mustApply(t, p, rm); len(first.Entries) != 1 || !first.Entries[0].Removed {
		t.Fatalf("the removal's batch: %+v, want alice removed", first.Entries)
	} // ... and its Redis call fails: nothing mirrored
	retry := mustApply(t, p, rm)
	if len(retry.Entries) != 1 || !retry.Entries[0].Removed || retry.Entries[0].Version != 3 {
		t.Fatalf("the redelivered removal's batch: %+v, want alice removed at version 3", retry.Entries)
	}
	mirrorBatch(t, boards, retry)
	if _, err := boards.User(ctx, "global", "all_time", "alice"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Redis after the redelivered removal: %v, want no entry", err)
	}

	// Redis lost the redelivery too: it still holds alice at version 2 when she plays again.
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := boards.Reload(ctx, ranks, global); err != nil {
		t.Fatal(err)
	}
	stale := storage.EntryState{Board: "global", Period: "all_time", UserID: "alice", Score: 120, SortKey: 120, Version: 2, ReachedAt: at(1), UpdatedAt: at(1)}
	if _, _, err := boards.Apply(ctx, global, []storage.EntryState{stale}, nil); err != nil {
		t.Fatal(err)
	}
	again := mustApply(t, p, bestEvent("ev-3", "alice", 50, at(3)))
	if s := entryOf(t, again, "global", "alice"); s.Version != 4 || s.Score != 50 {
		t.Fatalf("alice's new entry: %+v, want score 50 at version 4 (above the removed one's 3)", s)
	}
	mirrorBatch(t, boards, again)
	rep, err := boards.CheckConsistency(ctx, ranks, "global", "all_time", true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Consistent {
		t.Fatalf("Redis differs from PostgreSQL: %+v", rep)
	}
	if e, err := boards.User(ctx, "global", "all_time", "alice"); err != nil || e.Score != 50 {
		t.Fatalf("alice in Redis: %+v, %v; want 50", e, err)
	}

	// Removed a second time, then back: above the second removal.
	mustApply(t, p, removeEvent("ev-4", "alice"))
	back := mustApply(t, p, bestEvent("ev-5", "alice", 10, at(5)))
	if s := entryOf(t, back, "global", "alice"); s.Version != 6 {
		t.Fatalf("alice back after a second removal (version 5): %+v, want version 6", s)
	}
}
