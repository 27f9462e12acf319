package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestIndexMigrationLeavesWritesFlowing: migration 0020 adds an index to score_requests,
// which every accepted write inserts into. A plain CREATE INDEX (in goose's transaction)
// stopped every write for the whole build, and for as long as it waited behind a
// transaction on the table: a write that came behind it waited with it (found by a review
// of the upgrade path; at a week of event ids, a minute or more). Built CONCURRENTLY, the
// migration waits for the open transaction and writes go on meanwhile.
func TestIndexMigrationLeavesWritesFlowing(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pool := newTestPool(t)
	if err := storage.MigrateTo(ctx, pool, 19); err != nil {
		t.Fatal(err)
	}
	insert := `INSERT INTO score_requests (user_id, event_id, board_id, body_hash) VALUES ($1, $2, 'global', '\x00')`
	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(context.Background())
	if _, err := open.Exec(ctx, insert, "u0", "e0"); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	go func() { migrated <- storage.MigrateTo(ctx, pool, 20) }()
	// The migration is waiting behind the open transaction.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%score_requests_holds%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the migration never waited for the open transaction")
		}
		time.Sleep(10 * time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := pool.Exec(wctx, insert, "u1", "e1"); err != nil {
		t.Errorf("a write while the migration waits: %v (it waits behind the migration)", err)
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("migration 20: %v", err)
	}
	var valid bool
	if err := pool.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'score_requests_holds'::regclass`).Scan(&valid); err != nil || !valid {
		t.Errorf("score_requests_holds valid %v, %v", valid, err)
	}
}
