package storage_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestRequeueIsAtomic: when the transaction fails after the message went into the outbox
// but before the dead letter is deleted (a trigger makes the delete fail, as a crash
// would cut it), neither change stays: the dead letter is still there, the outbox has
// nothing, and a later requeue moves it exactly once.
func TestRequeueIsAtomic(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 2)
	ctx := testContext(t)
	admin := storage.NewDeadLetterAdmin(stdlib.OpenDBFromPool(pool), storage.NewOutboxSchema(), 2)
	var id int64
	if err := pool.QueryRow(ctx, `INSERT INTO dead_letters (uuid, event_id, payload, metadata, reason, topic, handler, subscriber, attempts)
		VALUES ('m-1', 'm-1', '\x7b7d', '{"partition_key": "u1", "event_id": "m-1"}', 'boom', 'leaderboard.score-events', 'apply-score', 'kafka', 1)
		RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'cut'; END $$;
		CREATE TRIGGER cut BEFORE DELETE ON dead_letters FOR EACH ROW EXECUTE FUNCTION refuse_delete();`); err != nil {
		t.Fatal(err)
	}
	outboxRows := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM "watermill_score_commands_0") + (SELECT count(*) FROM "watermill_score_commands_1")`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := admin.Requeue(ctx, id, "ops"); err == nil {
		t.Fatal("requeue succeeded although the delete failed")
	}
	if _, err := admin.Get(ctx, id); err != nil || outboxRows() != 0 {
		t.Fatalf("after the failed requeue: dead letter %v, outbox rows %d", err, outboxRows())
	}
	if _, err := pool.Exec(ctx, `DROP TRIGGER cut ON dead_letters`); err != nil {
		t.Fatal(err)
	}
	if err := admin.Requeue(ctx, id, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Get(ctx, id); !errors.Is(err, storage.ErrNotFound) || outboxRows() != 1 {
		t.Fatalf("after the requeue: dead letter %v, outbox rows %d", err, outboxRows())
	}
	var audited int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM admin_audit WHERE action = 'dlq.requeue' AND $1 = ANY(target_ids)`, id).Scan(&audited)
	if audited != 1 {
		t.Fatalf("requeue audited %d times", audited)
	}
}
