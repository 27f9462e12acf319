package storage_test

import (
	"testing"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestProjectionRedeliveredNamelessNewEntryHasTheUsersName_review12: alice is "Alice" on
// global; a game server's command (no nick name) gives her a first entry on points. Its
// batch committed in PostgreSQL but its Redis step failed (a Redis blip: the retry finds
// the event applied). The retry is the first time Redis gets the entry: it must carry her
// name, as the first attempt's would have (and as a redelivered named command's does,
// TestProjectionRedeliveryDoesNotRevertNickName). The unnamed lookup covers fresh events
// only, so Redis gets the new entry without a name until a rebuild.
func TestProjectionRedeliveredNamelessNewEntryHasTheUsersName_review12(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	first := bestEvent("ev-1", "alice", 100, at(1))
	first.NickName = "Alice"
	mustApply(t, p, first)
	nameless := incrEvent("ev-2", "alice", 5, at(2))
	if got := mustApply(t, p, nameless); got.NickNames["alice"] != "Alice" {
		t.Fatalf("first attempt: nick names %v", got.NickNames)
	}
	again := mustApply(t, p, nameless) // the retry after the mirror failed
	if again.NewEvents != 0 {
		t.Fatalf("retry: NewEvents = %d", again.NewEvents)
	}
	if n := again.NickNames["alice"]; n != "Alice" {
		t.Errorf("the retry hands the mirror nick name %q for alice's new points entry, want %q (Redis may never have got it)", n, "Alice")
	}
}

// TestProjectionUnbanSyncNamesTheEntries_review12: alice ("Alice") is banned (her entries
// hidden, the mirror deletes them and their names from Redis), then unbanned: the sync
// makes the mirror write every entry of hers again, new entries to Redis, which must carry
// her name as PostgreSQL's reads show it. The batch hands the mirror no name for a sync.
func TestProjectionUnbanSyncNamesTheEntries_review12(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	first := bestEvent("ev-1", "alice", 100, at(1))
	first.NickName = "Alice"
	mustApply(t, p, first)
	ctx := testContext(t)
	for i, hidden := range []bool{true, false} {
		if _, err := pool.Exec(ctx, `UPDATE board_entries SET hidden = $2, version = version + 1 WHERE user_id = $1`, "alice", hidden); err != nil {
			t.Fatal(err)
		}
		got := mustApply(t, p, storage.ScoreEvent{Op: storage.OpSync, EventID: []string{"sync-ban", "sync-unban"}[i], UserID: "alice", OccurredAt: at(2 + i)})
		if hidden {
			continue
		}
		if len(got.Entries) != 1 || got.Entries[0].Hidden {
			t.Fatalf("unban sync entries %+v", got.Entries)
		}
		if n := got.NickNames["alice"]; n != "Alice" {
			t.Errorf("the unban's sync hands the mirror nick name %q for alice's entries (written to Redis anew), want %q", n, "Alice")
		}
	}
}
