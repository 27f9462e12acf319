package storage_test

import (
	"errors"
	"testing"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestPostgresUserReadHidesBannedUsers: a banned (hidden) user's entry must be
// left out of every read; the PostgreSQL per-user read (closed periods, degraded reads)
// must answer ErrNotFound for it, as Users and Around do.
func TestPostgresUserReadHidesBannedUsers(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	ctx := testContext(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO board_entries (board_id, period, user_id, score, sort_key, version, reached_at, updated_at, hidden)
		VALUES ('daily', '2026-01-01', 'alice', 10, 10, 1, '2026-01-01T10:00:00Z', now(), false),
		       ('daily', '2026-01-01', 'mallory', 99, 99, 1, '2026-01-01T10:00:00Z', now(), true)`); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*storage.Ranks{"sorted": storage.NewRanks(pool), "closed": storage.NewRanks(pool).Closed()} {
		if us, err := r.Users(ctx, "daily", "2026-01-01", []string{"mallory"}); err != nil || len(us) != 0 {
			t.Fatalf("%s: Users lists the banned user: %v %v", name, us, err)
		}
		e, err := r.User(ctx, "daily", "2026-01-01", "mallory")
		if !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("%s: User of a banned user = rank %d score %d (err %v), want ErrNotFound", name, e.Rank, e.Score, err)
		}
	}
}
