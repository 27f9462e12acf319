package storage_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestProjectionRedeliveryDoesNotRevertNickName: a user's command with nick name "Alice"
// is applied, then their next command with "Alicia". A redelivery of the first (a
// rebalance's overlap, a retry after the Redis step failed) changes nothing: the user keeps
// "Alicia" in PostgreSQL, and the batch hands the Redis mirror "Alicia", not "Alice" (it
// wrote every event's nick name, duplicates included. Found by a review).
func TestProjectionRedeliveryDoesNotRevertNickName(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	first := bestEvent("ev-1", "alice", 100, at(1))
	first.NickName = "Alice"
	second := bestEvent("ev-2", "alice", 200, at(2))
	second.NickName = "Alicia"
	mustApply(t, p, first)
	mustApply(t, p, second)

	again := mustApply(t, p, first)
	if again.NewEvents != 0 {
		t.Fatalf("redelivery: NewEvents = %d, want 0", again.NewEvents)
	}
	var nick string
	if err := pool.QueryRow(testContext(t), `SELECT nick_name FROM users WHERE user_id = 'alice'`).Scan(&nick); err != nil {
		t.Fatal(err)
	}
	if nick != "Alicia" {
		t.Errorf("after a redelivery of the first command, PostgreSQL has nick name %q, want %q (the latest command's)", nick, "Alicia")
	}
	if n := again.NickNames["alice"]; n != "Alicia" {
		t.Errorf("the redelivery hands the mirror nick name %q for alice, want %q (PostgreSQL's: the mirror may be what failed the first time)", n, "Alicia")
	}
}

// TestProjectionRenameNamesEveryEntryOfTheUser: alice scores on global as "Alice", then
// on points as "Alicia". The second batch hands the mirror her global entry too, with
// the new name: Redis keeps a name per board period, and PostgreSQL's reads (and a
// rebuild) show the new one everywhere (found by a review: the global top went on
// showing "Alice" from Redis). A batch that changes no name names no other entry.
func TestProjectionRenameNamesEveryEntryOfTheUser(t *testing.T) {
	t.Parallel()
	_, p := aliceNamed(t)
	entries := func(b storage.AppliedBatch) map[string]bool {
		out := map[string]bool{}
		for _, e := range b.Entries {
			out[e.Board+":"+e.Period+":"+e.UserID] = true
		}
		return out
	}
	second := incrEvent("ev-2", "alice", 5, at(2))
	second.NickName = "Alicia"
	got := mustApply(t, p, second)
	if want := map[string]bool{"points:all_time:alice": true, "global:all_time:alice": true}; len(got.Entries) != 2 || !maps.Equal(entries(got), want) {
		t.Fatalf("the renaming batch names %v, want both of alice's entries once", got.Entries)
	}
	if got.NickNames["alice"] != "Alicia" {
		t.Fatalf("nick names %v", got.NickNames)
	}
	for _, e := range got.Entries {
		if want := e.Board == "global"; e.NameOnly != want {
			t.Errorf("entry %s:%s NameOnly = %v, want %v (only the entry named for the new name alone)", e.Board, e.Period, e.NameOnly, want)
		}
	}
	third := incrEvent("ev-3", "alice", 5, at(3))
	third.NickName = "Alicia"
	if got := mustApply(t, p, third); len(got.Entries) != 1 || !entries(got)["points:all_time:alice"] {
		t.Fatalf("a batch that renames nobody names %v, want only the entry it wrote", got.Entries)
	}
}

// namedAs lists the entries a batch names as board:NameOnly.
func namedAs(b storage.AppliedBatch) string {
	var out []string
	for _, e := range b.Entries {
		out = append(out, fmt.Sprintf("%s:%v", e.Board, e.NameOnly))
	}
	return strings.Join(out, " ")
}

// TestProjectionRedeliveredRenameNamesEveryEntry: the batch that renamed alice failed
// after PostgreSQL committed it (its Redis step, say); its retry finds the command applied
// and renames nobody, yet hands the mirror every entry of hers with the name PostgreSQL
// holds: the first attempt's mirror of them may be what failed. Also when the API that
// accepted the command reads a clock ahead of PostgreSQL's (another host): the rename is
// compared with the command's applied_at, PostgreSQL's clock too (compared with its
// OccurredAt, the API's, only the entry it names was handed). A command delivered again
// whose user was not renamed since it was applied (a rewind's backlog, say) names only its
// own entries. Found by reviews.
func TestProjectionRedeliveredRenameNamesEveryEntry(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		accepted time.Time
	}{{"API clock behind", at(2)}, {"API clock 2 s ahead", time.Now().Add(2 * time.Second)}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := newMigratedPool(t, 1)
			p := storage.NewProjection(pool)
			first := bestEvent("ev-1", "alice", 100, at(1))
			first.NickName = "Alice"
			mustApply(t, p, first)
			second := incrEvent("ev-2", "alice", 5, c.accepted)
			second.NickName = "Alicia"
			mustApply(t, p, second)
			again := mustApply(t, p, second)
			if again.NewEvents != 0 || again.NickNames["alice"] != "Alicia" {
				t.Fatalf("the retry: %d new events, nick names %v", again.NewEvents, again.NickNames)
			}
			if got := namedAs(again); got != "points:false global:true" {
				t.Errorf("the retry names %s, want points:false global:true (every entry of alice's)", got)
			}
			later := incrEvent("ev-3", "alice", 1, time.Now().Add(time.Hour))
			later.NickName = "Alicia"
			mustApply(t, p, later)
			if got := namedAs(mustApply(t, p, later)); got != "points:false" {
				t.Errorf("a redelivery without a rename since names %s, want only its points entry", got)
			}
		})
	}
}

// TestProjectionNewEntryOfANamelessCommandHasTheUsersName: alice is named "Alice" on
// global; a game server's command (its token names the server, so the command names
// nobody) gives her a first entry on points. The batch hands the mirror her name, which
// PostgreSQL's reads and a rebuild show (found by a review: Redis showed the new entry
// without a name). A later nameless command on an entry she has names nobody.
func TestProjectionNewEntryOfANamelessCommandHasTheUsersName(t *testing.T) {
	t.Parallel()
	_, p := aliceNamed(t)
	if got := mustApply(t, p, incrEvent("ev-2", "alice", 5, at(2))); got.NickNames["alice"] != "Alice" {
		t.Errorf("a nameless command's new entry: nick names %v, want alice's (Alice)", got.NickNames)
	}
	if got := mustApply(t, p, incrEvent("ev-3", "alice", 5, at(3))); len(got.NickNames) != 0 {
		t.Errorf("a nameless command on an entry alice has: nick names %v, want none (her entry has its name)", got.NickNames)
	}
	if got := mustApply(t, p, incrEvent("ev-4", "bob", 5, at(4))); len(got.NickNames) != 0 {
		t.Errorf("a user never named: nick names %v, want none", got.NickNames)
	}
}

// TestProjectionRedeliveredNamelessNewEntryHasTheUsersName: alice is "Alice" on
// global; a game server's command (no nick name) gives her a first entry on points. Its
// batch committed in PostgreSQL but its Redis step failed (a Redis blip: the retry finds
// the event applied). The retry is the first time Redis gets the entry: it carries her
// name, as the first attempt's would have (and as a redelivered named command's does,
// TestProjectionRedeliveryDoesNotRevertNickName). Found by a review.
func TestProjectionRedeliveredNamelessNewEntryHasTheUsersName(t *testing.T) {
	t.Parallel()
	_, p := aliceNamed(t)
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

// TestProjectionUnbanSyncNamesTheEntries: alice ("Alice") is banned (her entries
// hidden, the mirror deletes them and their names from Redis), then unbanned: the sync
// makes the mirror write every entry of hers again, new entries to Redis, which carry her
// name as PostgreSQL's reads show it (the batch handed the mirror none; found by a review).
func TestProjectionUnbanSyncNamesTheEntries(t *testing.T) {
	t.Parallel()
	pool, p := aliceNamed(t)
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

// aliceNamed is a projection whose first command, ev-1, gave alice a best score of 100
// on global under the nick name "Alice".
func aliceNamed(t *testing.T) (*pgxpool.Pool, *storage.Projection) {
	t.Helper()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	first := bestEvent("ev-1", "alice", 100, at(1))
	first.NickName = "Alice"
	mustApply(t, p, first)
	return pool, p
}
