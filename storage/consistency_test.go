package storage_test

import (
	"testing"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestConsistencyComparesNamesAndMetadata: the check reports an entry whose nick name or
// metadata in Redis is not PostgreSQL's (what a top or a page shows beside the score), by
// what differs, and a rebuild mends it. Metadata written differently but meaning the same
// is no difference.
func TestConsistencyComparesNamesAndMetadata(t *testing.T) {
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
	alice := bestEvent("ev-a", "alice", 100, at(1))
	alice.NickName, alice.Metadata = "Alice", []byte(`{"car": "red", "lap": 61}`)
	bob := bestEvent("ev-b", "bob", 90, at(1))
	bob.NickName = "Bob"
	mirrorBatch(t, boards, mustApply(t, p, alice, bob))

	check := func() storage.ConsistencyReport {
		t.Helper()
		rep, err := boards.CheckConsistency(ctx, ranks, "global", "all_time", true, 0)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := check(); !rep.Consistent || rep.Checked != 2 {
		t.Fatalf("a board as the projector wrote it: %+v", rep)
	}
	// The same metadata, written another way (key order, spacing): no difference.
	if err := rdb.HSet(ctx, prefix+":{global}:all_time:m", "alice", `{ "lap":61,"car":"red" }`).Err(); err != nil {
		t.Fatal(err)
	}
	if rep := check(); !rep.Consistent {
		t.Fatalf("metadata written another way reported: %+v", rep)
	}

	if err := rdb.HSet(ctx, prefix+":{global}:all_time:n", "bob", "Bobby-old").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, prefix+":{global}:all_time:m", "alice", `{"car": "blue", "lap": 61}`).Err(); err != nil {
		t.Fatal(err)
	}
	rep := check()
	if rep.Consistent || rep.Mismatched != 2 || rep.Checked != 2 {
		t.Fatalf("a stale nick name and stale metadata: %+v, want 2 mismatched", rep)
	}
	want := map[string]storage.Difference{
		"alice": {UserID: "alice", Field: "metadata", Postgres: `{"car": "red", "lap": 61}`, Redis: `{"car": "blue", "lap": 61}`},
		"bob":   {UserID: "bob", Field: "nick_name", Postgres: "Bob", Redis: "Bobby-old"},
	}
	for _, d := range rep.Differences {
		if d != want[d.UserID] {
			t.Errorf("difference %+v, want %+v", d, want[d.UserID])
		}
	}
	if len(rep.Differences) != 2 {
		t.Fatalf("differences %+v, want 2", rep.Differences)
	}

	// A name Redis lost is a difference too (an entry is reported once, by the first of
	// entry, nick name and metadata that differs).
	if err := rdb.HDel(ctx, prefix+":{global}:all_time:n", "alice").Err(); err != nil {
		t.Fatal(err)
	}
	if rep := check(); rep.Mismatched != 2 || rep.Differences[0] != (storage.Difference{UserID: "alice", Field: "nick_name", Postgres: "Alice"}) {
		t.Fatalf("a nick name missing from Redis: %+v, want alice's reported by her nick name", rep)
	}
	if _, err := boards.Rebuild(ctx, ranks, global); err != nil {
		t.Fatal(err)
	}
	if rep := check(); !rep.Consistent {
		t.Fatalf("after a rebuild: %+v", rep)
	}
}
