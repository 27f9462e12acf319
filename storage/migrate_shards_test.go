package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/openleaderboard/leaderboard/storage"
)

// TestMigrateWaitingOnOneShardLeavesTheOtherShardsWritable: every process runs Migrate at
// its start. Its outbox statements commit one by one, so one that waits for a busy shard's
// table (an open transaction that read it: a relay's rewind, a prune of a large backlog)
// holds no other shard's table meanwhile; and a shard's uuid column already TEXT is not
// altered again (an ALTER TABLE locks the table exclusively). Found by a review: all of
// them in one transaction held shard 0 while waiting for shard 1.
func TestMigrateWaitingOnOneShardLeavesTheOtherShardsWritable(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pool := newMigratedPool(t, 2)
	busyShard1 := func() pgx.Tx {
		t.Helper()
		busy, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { busy.Rollback(context.WithoutCancel(ctx)) }) //nolint:errcheck
		if _, err := busy.Exec(ctx, `SELECT count(*) FROM "watermill_score_commands_1"`); err != nil {
			t.Fatal(err)
		}
		return busy
	}

	// Every shard as Migrate leaves it: a start does not wait for a busy shard at all.
	busy := busyShard1()
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a wait on the busy shard would be for ever
	err := storage.Migrate(mctx, pool, storage.NewOutboxSchema(), 2)
	cancel()
	if err != nil {
		t.Fatalf("Migrate while shard 1 was busy: %v (it waited for the table, which needs no change)", err)
	}
	if err := busy.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// Shard 1 as an earlier version left it (uuid VARCHAR(36)): the start waits for it,
	// and meanwhile an API process's write to shard 0 must not.
	if _, err := pool.Exec(ctx, `ALTER TABLE "watermill_score_commands_1" ALTER COLUMN uuid TYPE VARCHAR(36)`); err != nil {
		t.Fatal(err)
	}
	busy = busyShard1()
	done := make(chan error, 1)
	go func() { done <- storage.Migrate(ctx, pool, storage.NewOutboxSchema(), 2) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND c.relname = 'watermill_score_commands_1')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Migrate ended (%v) while shard 1, to be altered, was busy: the scenario needs it to wait", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("Migrate never waited for shard 1")
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second) // a wait behind the migration would be for ever
	defer cancel()
	_, werr := conn.Exec(wctx, `INSERT INTO "watermill_score_commands_0" (uuid, payload, metadata, transaction_id)
		VALUES ('e-1', '{}', '{"partition_key": "u"}', pg_current_xact_id())`)
	if err := busy.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Migrate: %v", err)
	}
	if werr != nil {
		t.Errorf("a write to outbox shard 0 waited for a starting process's Migrate, itself waiting for shard 1 (15 s, then %v)", werr)
	}
	var typ string
	if err := pool.QueryRow(ctx, `SELECT atttypid::regtype::text FROM pg_attribute WHERE attrelid = '"watermill_score_commands_1"'::regclass AND attname = 'uuid'`).Scan(&typ); err != nil || typ != "text" {
		t.Errorf("shard 1's uuid after Migrate: %q %v, want text", typ, err)
	}
}
