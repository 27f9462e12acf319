package storage_test

import (
	"testing"

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
