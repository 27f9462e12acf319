package storage_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
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

// poisonedWith is a message the projector's poison queue hands the dead-letter store.
func poisonedWith(uuid string, payload []byte, meta map[string]string) *message.Message {
	m := message.NewMessage(uuid, payload)
	for k, v := range meta {
		m.Metadata.Set(k, v)
	}
	m.Metadata.Set(middleware.ReasonForPoisonedKey, "decode ScoreSubmitted: invalid character")
	m.Metadata.Set(middleware.PoisonedTopicKey, "leaderboard.score-events")
	m.Metadata.Set(middleware.PoisonedHandlerKey, "apply-score")
	m.Metadata.Set(middleware.PoisonedSubscriberKey, "kafka")
	return m
}

// outboxRowsOf counts the outbox rows (every shard) that carry message uuid, plain
// or inside a forwarder envelope (a requeued dead letter).
func outboxRowsOf(t *testing.T, f *outboxFixture, uuid string) int {
	t.Helper()
	var n int
	for shard := range testShards {
		var c int
		if err := f.pool.QueryRow(testContext(t), `SELECT count(*) FROM `+outboxTable(shard)+`
			WHERE uuid = $1 OR payload->>'uuid' = $1`, uuid).Scan(&c); err != nil {
			t.Fatal(err)
		}
		n += c
	}
	return n
}

// deadLetterFixture is an outbox with the stores that act on its dead letters: the
// relay's upkeep, the admin's, and the projector's poison queue.
func deadLetterFixture(t *testing.T) (*outboxFixture, context.Context, *storage.OutboxMaintenance, *storage.DeadLetterAdmin, *storage.DeadLetters) {
	t.Helper()
	f := newOutboxFixture(t)
	return f, testContext(t), storage.NewOutboxMaintenance(f.pool, storage.NewOutboxSchema()),
		storage.NewDeadLetterAdmin(f.db, storage.NewOutboxSchema(), testShards), storage.NewDeadLetters(f.pool)
}

// passEnvelope moves the relay of the shard of key past the envelope of message uuid (it
// was forwarded), as a relay does, and returns the shard.
func passEnvelope(t *testing.T, f *outboxFixture, key, uuid string) int {
	t.Helper()
	ctx := testContext(t)
	shard := storage.ShardOf(key, testShards)
	var tx string
	var off int64
	if err := f.pool.QueryRow(ctx, `SELECT transaction_id::text, "offset" FROM `+outboxTable(shard)+` WHERE payload->>'uuid' = $1`, uuid).Scan(&tx, &off); err != nil {
		t.Fatalf("requeued row: %v", err)
	}
	if _, err := f.pool.Exec(ctx, `INSERT INTO `+offsetsTable(shard)+` (consumer_group, offset_acked, last_processed_transaction_id)
		VALUES ($1, $2, $3::text::xid8)
		ON CONFLICT (consumer_group) DO UPDATE SET offset_acked = excluded.offset_acked, last_processed_transaction_id = excluded.last_processed_transaction_id`,
		storage.RelayConsumerGroup, off, tx); err != nil {
		t.Fatal(err)
	}
	return shard
}

// TestRequeuedKeylessDeadLetterIsPrunedAndDeletable: a malformed message on the score
// topic without event_id and partition_key headers, or with empty ones, or with a
// poison_attempts header that is no count (any producer but the relay may send one,
// TestDeadLetterAdmin's case), is dead-lettered with no user and no event id. Once requeued and dead-lettered again, its outbox row (a forwarder
// envelope) is found by its message uuid: the prune deletes it, a DELETE /admin/dlq/{id}
// deletes it, and a relay start does not take it for a command a broker lost (matched by
// user and event id only, it was forwarded again at every relay start, and the dropped
// dead letter came back; with an empty header the envelope's user was ”, not none).
func TestRequeuedKeylessDeadLetterIsPrunedAndDeletable(t *testing.T) {
	t.Parallel()
	f, ctx, maint, admin, dl := deadLetterFixture(t)
	payload := []byte{0xff, 0x00, '{'}
	idOf := func(uuid string) int64 {
		t.Helper()
		var id int64
		if err := f.pool.QueryRow(ctx, `SELECT id FROM dead_letters WHERE uuid = $1`, uuid).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	for _, c := range []struct {
		uuid  string
		meta  map[string]string
		prune bool // the prune deletes its row; else the admin drops it
	}{
		{"raw-kafka-msg-1", map[string]string{}, true},
		{"raw-kafka-msg-2", map[string]string{}, false},
		{"empty-key-msg-1", map[string]string{"partition_key": "", "event_id": ""}, true},
		{"empty-key-msg-2", map[string]string{"partition_key": "", "event_id": ""}, false},
		{"neg-attempts-1", map[string]string{storage.MetaAttempts: "-2"}, true}, // a header that says anything
		{"neg-attempts-2", map[string]string{storage.MetaAttempts: "-2"}, false},
		{"huge-attempts-1", map[string]string{storage.MetaAttempts: "999999999"}, true}, // at the cap
		{"huge-attempts-2", map[string]string{storage.MetaAttempts: "999999999"}, false},
	} {
		if err := dl.Publish("poison", poisonedWith(c.uuid, payload, c.meta)); err != nil {
			t.Fatal(err)
		}
		if err := admin.Requeue(ctx, idOf(c.uuid), "ops"); err != nil {
			t.Fatal(err)
		}
		shard := passEnvelope(t, f, c.uuid, c.uuid)
		// Dead-lettered again, with the metadata its envelope carried.
		var attempts string
		if err := f.pool.QueryRow(ctx, `SELECT payload->'metadata'->>$2 FROM `+outboxTable(shard)+` WHERE payload->>'uuid' = $1`,
			c.uuid, storage.MetaAttempts).Scan(&attempts); err != nil {
			t.Fatal(err)
		}
		c.meta[storage.MetaAttempts] = attempts
		if err := dl.Publish("poison", poisonedWith(c.uuid, payload, c.meta)); err != nil {
			t.Fatal(err)
		}
		again := idOf(c.uuid)
		if n, err := maint.Rewind(ctx, shard); err != nil || n != 0 {
			t.Errorf("%s: a relay start rewinds %d rows (%v), want 0: the dead-lettered message would be forwarded again", c.uuid, n, err)
		}
		if c.prune {
			if _, err := maint.Prune(ctx, shard, 5000); err != nil {
				t.Fatal(err)
			}
			if n := outboxRowsOf(t, f, c.uuid); n != 0 {
				t.Errorf("%s: after the prune: %d outbox rows of the forwarded, dead-lettered message, want 0", c.uuid, n)
			}
			continue
		}
		if err := admin.Delete(ctx, again, "ops"); err != nil {
			t.Fatal(err)
		}
		if n := outboxRowsOf(t, f, c.uuid); n != 0 {
			t.Errorf("%s: after DELETE /admin/dlq/%d: %d outbox rows of the dropped message remain", c.uuid, again, n)
		}
		if n, err := maint.Rewind(ctx, shard); err != nil || n != 0 {
			t.Errorf("%s: relay start after the delete: Rewind = %d, %v; want 0", c.uuid, n, err)
		}
	}
}

// TestDeleteOfADuplicateDeadLetterKeepsTheRequeuedCommand: Kafka delivers at
// least once, so one command can be dead-lettered twice (poisoned, then redelivered
// after a crash before the offset commit, poisoned again). The admin requeues one of the
// two (answered 200 "requeued") and drops the other as a duplicate. The delete keeps
// the envelope the requeue put in the outbox (it removed every row of the user and event
// id: the requeued command was never forwarded nor applied, and no dead letter either).
func TestDeleteOfADuplicateDeadLetterKeepsTheRequeuedCommand(t *testing.T) {
	t.Parallel()
	f, ctx, _, admin, dl := deadLetterFixture(t)

	const user, event = "u-dup", "ev-dup"
	body := []byte(fmt.Sprintf(`{"event_id":%q,"board":"global","period":"all_time","user_id":%q,"value":5,"occurred_at":"2026-01-01T00:00:00Z"}`, event, user))
	meta := map[string]string{"event_id": event, "partition_key": user}
	for range 2 { // the first delivery and the redelivery
		if err := dl.Publish("poison", poisonedWith(event, body, meta)); err != nil {
			t.Fatal(err)
		}
	}
	var ids []int64
	rows, err := f.pool.Query(ctx, `SELECT id FROM dead_letters ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if len(ids) != 2 {
		t.Fatalf("%d dead letters, want 2", len(ids))
	}
	if err := admin.Requeue(ctx, ids[0], "ops"); err != nil {
		t.Fatal(err)
	}
	if n := outboxRowsOf(t, f, event); n != 1 {
		t.Fatalf("after the requeue: %d outbox rows, want 1", n)
	}
	if err := admin.Delete(ctx, ids[1], "ops"); err != nil {
		t.Fatal(err)
	}
	if n := outboxRowsOf(t, f, event); n != 1 {
		t.Errorf("deleting the duplicate dead letter %d dropped the command dead letter %d was requeued as: %d outbox rows, want 1", ids[1], ids[0], n)
	}
}

// TestRequeueOfADuplicateDeadLetterIsNotTakenForDone: one command dead-lettered twice
// (at-least-once delivery). The admin requeues one of the two; the other, as old, says
// nothing of the requeue's fate: the relay's rewind after a broker lost the forwarded
// envelope forwards it again (the duplicate matched its user and event id, and the
// requeued command was lost for good; found by a review).
func TestRequeueOfADuplicateDeadLetterIsNotTakenForDone(t *testing.T) {
	t.Parallel()
	f, ctx, maint, admin, dl := deadLetterFixture(t)

	const user, event = "u-dup2", "ev-dup2"
	body := []byte(fmt.Sprintf(`{"event_id":%q,"board":"global","period":"all_time","user_id":%q,"value":5,"occurred_at":"2026-01-01T00:00:00Z"}`, event, user))
	meta := map[string]string{"event_id": event, "partition_key": user}
	for range 2 {
		if err := dl.Publish("poison", poisonedWith(event, body, meta)); err != nil {
			t.Fatal(err)
		}
	}
	var first int64
	if err := f.pool.QueryRow(ctx, `SELECT min(id) FROM dead_letters`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if err := admin.Requeue(ctx, first, "ops"); err != nil {
		t.Fatal(err)
	}
	// The relay forwards the envelope; the broker dies with it (never applied, never
	// dead-lettered again). The relay starts again.
	shard := passEnvelope(t, f, user, event)
	n, err := maint.Rewind(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("relay start after the broker lost the requeued command: Rewind = %d rows, want 1 (the envelope counts as done because of the other duplicate dead letter)", n)
	}
}

// TestRequeuedUUIDlessForeignMessagesAreToldApart: another producer's messages without a
// uuid (TestDeadLetterAdmin's produceRaw) are dead-lettered with an empty one. Requeued,
// each gets a uuid of its own, so that one dead-lettered again does not stand for another
// whose envelope is still on its way: the prune keeps that one and a delete of the first's
// new dead letter leaves it (all matched the empty uuid: a pending requeue was taken as
// done and dropped; found by a review).
func TestRequeuedUUIDlessForeignMessagesAreToldApart(t *testing.T) {
	t.Parallel()
	f, ctx, maint, admin, dl := deadLetterFixture(t)
	for _, p := range []string{"A", "B"} {
		if err := dl.Publish("poison", poisonedWith("", []byte{0xff, 0x00, p[0]}, map[string]string{})); err != nil {
			t.Fatal(err)
		}
	}
	if ids, err := admin.RequeueMatching(ctx, storage.DeadLetterFilter{Limit: 10}, "ops"); err != nil || len(ids) != 2 {
		t.Fatalf("requeue: %v, %v", ids, err)
	}
	envelope := map[string]string{} // payload (base64) -> the uuid its requeue gave it
	for shard := range testShards {
		rows, err := f.pool.Query(ctx, `SELECT payload->>'payload', payload->>'uuid' FROM `+outboxTable(shard))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var p, u string
			if err := rows.Scan(&p, &u); err != nil {
				t.Fatal(err)
			}
			envelope[p] = u
		}
		rows.Close()
	}
	a, b := envelope["/wBB"], envelope["/wBC"] // base64 of the payloads A and B
	if a == "" || b == "" || a == b {
		t.Fatalf("the requeued messages' uuids: %v, want two of their own", envelope)
	}
	shardA, shardB := passEnvelope(t, f, a, a), passEnvelope(t, f, b, b) // forwarded; B lost by the broker
	if err := dl.Publish("poison", poisonedWith(a, []byte{0xff, 0x00, 'A'}, map[string]string{storage.MetaAttempts: "1"})); err != nil {
		t.Fatal(err)
	}
	for _, shard := range []int{shardA, shardB} {
		if _, err := maint.Prune(ctx, shard, 5000); err != nil {
			t.Fatal(err)
		}
	}
	if n := outboxRowsOf(t, f, a); n != 0 {
		t.Errorf("A, dead-lettered again: %d outbox rows after the prune, want 0", n)
	}
	if n := outboxRowsOf(t, f, b); n != 1 {
		t.Errorf("B, on its way: %d outbox rows after the prune, want 1 (taken as done by A's dead letter)", n)
	}
	var againA int64
	if err := f.pool.QueryRow(ctx, `SELECT id FROM dead_letters WHERE uuid = $1`, a).Scan(&againA); err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(ctx, againA, "ops"); err != nil {
		t.Fatal(err)
	}
	if n := outboxRowsOf(t, f, b); n != 1 {
		t.Errorf("B after A's dead letter was deleted: %d outbox rows, want 1", n)
	}
}

// TestEarlierRequeueWithoutUUIDGetsOneOnUpgrade: an envelope an earlier build wrote for
// the requeue of a message without a uuid kept it empty, which names nothing now; the
// upgrade's migration 0017 gives it one, and passes over a row it cannot read. Forwarded
// once more at the next relay start and dead-lettered again with that uuid, it is done:
// the prune deletes it (without the migration it stayed pending for good, forwarded again
// at every relay start; found by a review).
func TestEarlierRequeueWithoutUUIDGetsOneOnUpgrade(t *testing.T) {
	t.Parallel()
	f, ctx, maint, admin, dl := deadLetterFixture(t)
	payload := []byte{0xff, 0x00, 'L'}
	if err := dl.Publish("poison", poisonedWith("", payload, map[string]string{})); err != nil {
		t.Fatal(err)
	}
	if ids, err := admin.RequeueMatching(ctx, storage.DeadLetterFilter{Limit: 10}, "ops"); err != nil || len(ids) != 1 {
		t.Fatalf("requeue: %v, %v", ids, err)
	}
	envelope := func() (shard int, uuid string) {
		t.Helper()
		for s := range testShards {
			if err := f.pool.QueryRow(ctx, `SELECT payload->>'uuid' FROM `+outboxTable(s)+` WHERE payload->>'destination_topic' IS NOT NULL`).Scan(&uuid); err == nil {
				return s, uuid
			}
		}
		t.Fatal("no envelope")
		return 0, ""
	}
	shard, uuid := envelope()
	// An earlier build let a \u0000 into a command's metadata, which PostgreSQL's JSON
	// operators cannot read: the upgrade leaves that row as it is (it failed on it).
	// (In the other shard: this test's own reads of the envelope's shard parse every row.)
	nulUser := usersOfShard(t, 1-shard, 1)[0]
	if got := f.accept(command("nul-1", nulUser, `{"event_id":"nul-1","metadata":{"note":"a\u0000b"},"destination_topic":"x","uuid":""}`)); got != storage.Accepted {
		t.Fatalf("Accept = %v", got)
	}
	// As the earlier build wrote it (its database then upgraded to this build).
	if _, err := f.pool.Exec(ctx, `UPDATE `+outboxTable(shard)+` SET payload = jsonb_set(payload::jsonb, '{uuid}', '""')::json WHERE payload->>'uuid' = $1`, uuid); err != nil {
		t.Fatal(err)
	}
	upgrade(t, f)
	if _, uuid = envelope(); uuid == "" {
		t.Fatal("after the upgrade the earlier build's envelope still has no uuid")
	}
	passShard(t, f, shard) // forwarded once more, and dead-lettered again with its uuid
	if err := dl.Publish("poison", poisonedWith(uuid, payload, map[string]string{storage.MetaAttempts: "1"})); err != nil {
		t.Fatal(err)
	}
	if n, err := maint.Rewind(ctx, shard); err != nil || n != 0 {
		t.Errorf("a relay start rewinds %d rows (%v), want 0", n, err)
	}
	if _, err := maint.Prune(ctx, shard, 5000); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM `+outboxTable(shard)+` WHERE payload->>'uuid' = $1`, uuid).Scan(&n); err != nil || n != 0 {
		t.Errorf("after the prune: %d outbox rows of the requeue dead-lettered again (%v), want 0", n, err)
	}
}

// passShard moves the relay of shard past every row it holds, as a relay that forwarded
// them does.
func passShard(t *testing.T, f *outboxFixture, shard int) {
	t.Helper()
	if _, err := f.pool.Exec(testContext(t), `INSERT INTO `+offsetsTable(shard)+` (consumer_group, offset_acked, last_processed_transaction_id)
		SELECT $1, "offset", transaction_id FROM `+outboxTable(shard)+` ORDER BY transaction_id DESC, "offset" DESC LIMIT 1
		ON CONFLICT (consumer_group) DO UPDATE SET offset_acked = excluded.offset_acked, last_processed_transaction_id = excluded.last_processed_transaction_id`,
		storage.RelayConsumerGroup); err != nil {
		t.Fatal(err)
	}
}

// upgrade runs the migrations again from version 17 on, as the upgrade to this build does
// on a database an earlier build left.
func upgrade(t *testing.T, f *outboxFixture) {
	t.Helper()
	ctx := testContext(t)
	if _, err := f.pool.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id >= 17`); err != nil {
		t.Fatal(err)
	}
	if err := storage.Migrate(ctx, f.pool, storage.NewOutboxSchema(), testShards); err != nil {
		t.Fatal(err)
	}
}

// TestDuplicateDeadLettersWithAnAttemptsHeaderOutOfRangeKeepTheRequeue: another producer's
// message with a poison_attempts header at the cap, delivered twice (two dead letters).
// The requeue of one is still on its way after a broker lost it, and deleting the other
// keeps it: a header out of range counts no attempt (clamped to the cap, the duplicate
// looked newer than its twin's requeue; found by a review).
func TestDuplicateDeadLettersWithAnAttemptsHeaderOutOfRangeKeepTheRequeue(t *testing.T) {
	t.Parallel()
	f, ctx, maint, admin, dl := deadLetterFixture(t)
	const uuid = "cap-dup-msg"
	for range 2 {
		if err := dl.Publish("poison", poisonedWith(uuid, []byte{0xff, 0x00, 'C'}, map[string]string{storage.MetaAttempts: "999999999"})); err != nil {
			t.Fatal(err)
		}
	}
	var first, second int64
	if err := f.pool.QueryRow(ctx, `SELECT min(id), max(id) FROM dead_letters`).Scan(&first, &second); err != nil {
		t.Fatal(err)
	}
	if err := admin.Requeue(ctx, first, "ops"); err != nil {
		t.Fatal(err)
	}
	shard := passEnvelope(t, f, uuid, uuid) // forwarded; the broker loses it
	if n, err := maint.Rewind(ctx, shard); err != nil || n != 1 {
		t.Errorf("relay start after the broker lost the requeue: Rewind = %d, %v; want 1 (the duplicate dead letter is taken for its fate)", n, err)
	}
	if err := admin.Delete(ctx, second, "ops"); err != nil {
		t.Fatal(err)
	}
	if n := outboxRowsOf(t, f, uuid); n != 1 {
		t.Errorf("deleting the duplicate dead letter %d dropped the requeue of dead letter %d: %d outbox rows, want 1", second, first, n)
	}
}

// TestEarlierNonPositiveAttemptsAreDoneAfterTheUpgrade: an earlier build stored another
// producer's poison_attempts header of -2 as a dead letter of -1 attempts, and one of 0
// for the message requeued and dead-lettered again. After the upgrade (migration 0017: a
// count below 1 is 1) its envelope, which reads as 0, is done: a relay start does not
// forward it again, and deleting the dead letter removes it (found by a review).
func TestEarlierNonPositiveAttemptsAreDoneAfterTheUpgrade(t *testing.T) {
	t.Parallel()
	f, ctx, maint, admin, _ := deadLetterFixture(t)
	const uuid = "old-neg-msg"
	insert := func(attempts int) int64 {
		t.Helper()
		var id int64
		if err := f.pool.QueryRow(ctx, `INSERT INTO dead_letters (uuid, payload, metadata, reason, topic, handler, subscriber, attempts)
			VALUES ($1, '\xff00', '{}', 'bad', 'leaderboard.score-events', 'apply-score', 'kafka', $2) RETURNING id`, uuid, attempts).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	if err := admin.Requeue(ctx, insert(-1), "ops"); err != nil {
		t.Fatal(err)
	}
	shard := storage.ShardOf(uuid, testShards)
	// The earlier build's envelope carried "-1".
	if _, err := f.pool.Exec(ctx, `UPDATE `+outboxTable(shard)+` SET payload = jsonb_set(payload::jsonb, '{metadata,poison_attempts}', '"-1"')::json WHERE payload->>'uuid' = $1`, uuid); err != nil {
		t.Fatal(err)
	}
	passShard(t, f, shard)
	again := insert(0) // dead-lettered again under the earlier build
	upgrade(t, f)
	if n, err := maint.Rewind(ctx, shard); err != nil || n != 0 {
		t.Errorf("relay start: Rewind = %d, %v; want 0 (the dead-lettered message is forwarded again at every relay start)", n, err)
	}
	if err := admin.Delete(ctx, again, "ops"); err != nil {
		t.Fatal(err)
	}
	if n := outboxRowsOf(t, f, uuid); n != 0 {
		t.Errorf("after DELETE of its dead letter: %d outbox rows of the message, want 0", n)
	}
}

// TestUnreadableCommandRowDoesNotStopTheUpkeep: builds before c24feac let a \u0000 into
// a command's metadata; PostgreSQL's json column keeps it, but its JSON operators refuse
// to read that payload. The command was dead-lettered. The relay's upkeep of its shard
// reads a command row's own metadata, never its payload: the prune deletes the row, a
// relay start and CheckDroppedShards go on, and a dead letter's delete too (each failed on
// the row, the prune at every run and the relay start for good; found by a review).
func TestUnreadableCommandRowDoesNotStopTheUpkeep(t *testing.T) {
	t.Parallel()
	f, ctx, maint, admin, dl := deadLetterFixture(t)
	user := usersOfShard(t, 1, 1)[0]
	body := fmt.Sprintf(`{"event_id":"nul-1","board":"global","period":"all_time","user_id":%q,"value":5,"metadata":{"note":"a\u0000b"},"occurred_at":"2026-01-01T00:00:00Z"}`, user)
	if got := f.accept(command("nul-1", user, body)); got != storage.Accepted {
		t.Fatalf("Accept = %v", got)
	}
	if err := dl.Publish("poison", poisonedWith("nul-1", []byte(body), map[string]string{"event_id": "nul-1", "partition_key": user})); err != nil {
		t.Fatal(err)
	}
	passShard(t, f, 1)
	if err := dl.Publish("poison", poisonedWith("other-1", []byte("x"), map[string]string{})); err != nil {
		t.Fatal(err)
	}
	var other int64
	if err := f.pool.QueryRow(ctx, `SELECT id FROM dead_letters WHERE uuid = 'other-1'`).Scan(&other); err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(ctx, other, "ops"); err != nil {
		t.Errorf("DELETE /admin/dlq/%d: %v", other, err)
	}
	if n, err := maint.Rewind(ctx, 1); err != nil || n != 0 {
		t.Errorf("Rewind (relay start) = %d, %v; want 0", n, err)
	}
	if err := storage.CheckDroppedShards(ctx, f.pool, storage.NewOutboxSchema(), 1); err != nil {
		t.Errorf("CheckDroppedShards with one shard left (shard 1's row is dead-lettered): %v", err)
	}
	if n, err := maint.Prune(ctx, 1, 5000); err != nil || n != 1 {
		t.Errorf("Prune = %d, %v; want the dead-lettered row deleted", n, err)
	}
}

// TestRequeueAtTheCapIsDoneWhenDeadLetteredAgain: another producer's message with a
// poison_attempts header of 999999997 (the most DeadLetters.Publish reads: maxAttempts-2)
// is dead-lettered with 999999998 attempts. Requeued and dead-lettered again, the message
// must have more attempts than its envelope says: a requeue header Publish reads as out
// of range (the requeue once carried 999999998) stored 1, and the envelope never counted
// as done: every relay start forwarded it again (Rewind), the prune kept it for good, and
// DELETE /admin/dlq/{id} of its new dead letter left it.
func TestRequeueAtTheCapIsDoneWhenDeadLetteredAgain(t *testing.T) {
	t.Parallel()
	f, ctx, maint, admin, dl := deadLetterFixture(t)
	payload := []byte{0xff, 0x00, 'Q'}
	const uuid = "cap-edge-msg"
	if err := dl.Publish("poison", poisonedWith(uuid, payload, map[string]string{storage.MetaAttempts: "999999997"})); err != nil {
		t.Fatal(err)
	}
	var id int64
	var attempts int
	if err := f.pool.QueryRow(ctx, `SELECT id, attempts FROM dead_letters WHERE uuid = $1`, uuid).Scan(&id, &attempts); err != nil {
		t.Fatal(err)
	}
	if err := admin.Requeue(ctx, id, "ops"); err != nil {
		t.Fatal(err)
	}
	shard := passEnvelope(t, f, uuid, uuid)
	var header string
	if err := f.pool.QueryRow(ctx, `SELECT payload->'metadata'->>$2 FROM `+outboxTable(shard)+` WHERE payload->>'uuid' = $1`,
		uuid, storage.MetaAttempts).Scan(&header); err != nil {
		t.Fatal(err)
	}
	// Dead-lettered again, with the metadata its envelope carried.
	if err := dl.Publish("poison", poisonedWith(uuid, payload, map[string]string{storage.MetaAttempts: header})); err != nil {
		t.Fatal(err)
	}
	var again int64
	var againAttempts int
	if err := f.pool.QueryRow(ctx, `SELECT id, attempts FROM dead_letters WHERE uuid = $1`, uuid).Scan(&again, &againAttempts); err != nil {
		t.Fatal(err)
	}
	t.Logf("first dead letter: %d attempts; requeue header %s; dead-lettered again: %d attempts", attempts, header, againAttempts)
	if n, err := maint.Rewind(ctx, shard); err != nil || n != 0 {
		t.Errorf("a relay start rewinds %d rows (%v), want 0: the dead-lettered requeue is forwarded again at every start", n, err)
	}
	if err := admin.Delete(ctx, again, "ops"); err != nil {
		t.Fatal(err)
	}
	if n := outboxRowsOf(t, f, uuid); n != 0 {
		t.Errorf("after DELETE /admin/dlq/%d: %d outbox rows of the dropped message remain, want 0", again, n)
	}
}
