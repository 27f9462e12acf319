package storage_test

import (
	"testing"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestNickNameIsTheLatestAcceptedCommands: "Nick names are one per user, the
// latest a command of theirs carried" (README). Two commands of alice, accepted at t1 as
// "Alice" and at t2 as "Alicia", reach one batch the other way round (outbox order is
// commit order, not acceptance order). The projection keeps the name of the command last
// in the batch, "Alice", the older one, though it decides everything else by acceptance
// time (reach time, set's "older event is ignored").
func TestNickNameIsTheLatestAcceptedCommands(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	p := storage.NewProjection(pool)
	older := incrEvent("ev-1", "alice", 1, at(1))
	older.NickName = "Alice"
	newer := incrEvent("ev-2", "alice", 1, at(2))
	newer.NickName = "Alicia"
	out := mustApply(t, p, newer, older)
	var nick string
	if err := pool.QueryRow(testContext(t), `SELECT nick_name FROM users WHERE user_id = 'alice'`).Scan(&nick); err != nil {
		t.Fatal(err)
	}
	if nick != "Alicia" || out.NickNames["alice"] != "Alicia" {
		t.Errorf("PostgreSQL has nick name %q and the mirror gets %q, want %q (the latest accepted command's)", nick, out.NickNames["alice"], "Alicia")
	}
}
