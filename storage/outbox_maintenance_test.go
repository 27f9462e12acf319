package storage_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/openleaderboard/leaderboard/storage"
)

type position struct {
	tx     string // xid8 as text
	offset int64
}

// usersOfShard returns n user ids that all map to shard.
func usersOfShard(t *testing.T, shard, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		if i > 10000 {
			t.Fatalf("no users for shard %d", shard)
		}
		u := fmt.Sprintf("user-%d", i)
		if storage.ShardOf(u, testShards) == shard {
			out = append(out, u)
		}
	}
	return out
}

type relayFixture struct {
	*outboxFixture
	maint *storage.OutboxMaintenance
	shard int
	rows  []position // positions of ev-1..ev-6, in forwarding order
	users []string   // the user of ev-i is users[i-1]
}

// newRelayFixture puts ev-1..ev-6 into shard 0's outbox (one transaction each) and one
// command into shard 1, then applies ev-1, ev-2, ev-5, ev-6 and dead-letters ev-3; ev-4
// is neither applied nor dead-lettered.
func newRelayFixture(t *testing.T) *relayFixture {
	t.Helper()
	f := &relayFixture{outboxFixture: newOutboxFixture(t), shard: 0}
	f.maint = storage.NewOutboxMaintenance(f.pool, storage.NewOutboxSchema())
	users := usersOfShard(t, 0, 6)
	f.users = users
	for i := 1; i <= 6; i++ {
		if got := f.accept(command(fmt.Sprintf("ev-%d", i), users[i-1], "b")); got != storage.Accepted {
			t.Fatalf("Accept ev-%d = %v", i, got)
		}
	}
	f.accept(command("ev-other-shard", usersOfShard(t, 1, 1)[0], "b"))

	rows, err := f.pool.Query(testContext(t), `SELECT transaction_id::text, "offset", uuid FROM `+outboxTable(0)+` ORDER BY transaction_id, "offset"`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p position
		var id string
		if err := rows.Scan(&p.tx, &p.offset, &id); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("ev-%d", len(f.rows)+1); id != want {
			t.Fatalf("outbox row %d is %s, want %s", len(f.rows), id, want)
		}
		f.rows = append(f.rows, p)
	}
	if err := rows.Err(); err != nil || len(f.rows) != 6 {
		t.Fatalf("outbox rows: %v, %d", err, len(f.rows))
	}

	var events []storage.ScoreEvent
	for _, i := range []int{1, 2, 5, 6} {
		events = append(events, incrEvent(fmt.Sprintf("ev-%d", i), users[i-1], 1, at(i)))
	}
	// Another user's event with the id ev-4 is not ev-4's: event ids are scoped by user.
	events = append(events, incrEvent("ev-4", "someone-else", 1, at(4)))
	mustApply(t, storage.NewProjection(f.pool), events...)

	poisoned := message.NewMessage("kafka-msg-3", []byte("{"))
	poisoned.Metadata.Set("event_id", "ev-3")
	poisoned.Metadata.Set("partition_key", users[2])
	poisoned.Metadata.Set("reason_poisoned", "bad payload")
	if err := storage.NewDeadLetters(f.pool).Publish("poison", poisoned); err != nil {
		t.Fatalf("dead letter: %v", err)
	}
	return f
}

// setOffset simulates the forwarder having acked up to row p.
func (f *relayFixture) setOffset(p position) {
	f.t.Helper()
	_, err := f.pool.Exec(testContext(f.t), `
		INSERT INTO `+offsetsTable(f.shard)+` (consumer_group, offset_acked, last_processed_transaction_id)
		VALUES ($1, $2, $3::text::xid8)
		ON CONFLICT (consumer_group) DO UPDATE SET offset_acked = excluded.offset_acked, last_processed_transaction_id = excluded.last_processed_transaction_id`,
		storage.RelayConsumerGroup, p.offset, p.tx)
	if err != nil {
		f.t.Fatalf("set offset: %v", err)
	}
}

func (f *relayFixture) offset() position {
	f.t.Helper()
	var p position
	err := f.pool.QueryRow(testContext(f.t), `SELECT last_processed_transaction_id::text, offset_acked FROM `+offsetsTable(f.shard)+` WHERE consumer_group = $1`,
		storage.RelayConsumerGroup).Scan(&p.tx, &p.offset)
	if err != nil {
		f.t.Fatalf("read offset: %v", err)
	}
	return p
}

func (f *relayFixture) backlog(shard int) int64 {
	f.t.Helper()
	n, err := f.maint.Backlog(testContext(f.t), shard)
	if err != nil {
		f.t.Fatalf("Backlog: %v", err)
	}
	return n
}

func (f *relayFixture) rewind() int64 {
	f.t.Helper()
	n, err := f.maint.Rewind(testContext(f.t), f.shard)
	if err != nil {
		f.t.Fatalf("Rewind: %v", err)
	}
	return n
}

// just before row i (0-based): where the forwarder resumes to deliver row i next.
func (f *relayFixture) before(i int) position {
	return position{tx: f.rows[i].tx, offset: f.rows[i].offset - 1}
}

func TestOutboxMaintenanceRewind(t *testing.T) {
	t.Parallel()
	f := newRelayFixture(t)
	if got := f.backlog(0); got != 6 {
		t.Errorf("Backlog before the forwarder ran = %d, want 6", got)
	}

	f.setOffset(f.rows[5]) // everything forwarded
	if got := f.backlog(0); got != 0 {
		t.Errorf("Backlog with everything forwarded = %d, want 0", got)
	}
	if got := f.backlog(1); got != 1 {
		t.Errorf("Backlog of shard 1 = %d, want 1", got)
	}

	// ev-4 (row 3) is the oldest neither applied nor dead-lettered.
	if got := f.rewind(); got != 3 {
		t.Errorf("Rewind = %d, want 3 rows to forward again (ev-4, ev-5, ev-6)", got)
	}
	if got, want := f.offset(), f.before(3); got != want {
		t.Errorf("offset after Rewind = %+v, want %+v (just before ev-4)", got, want)
	}
	if got := f.backlog(0); got != 3 {
		t.Errorf("Backlog after Rewind = %d, want 3", got)
	}

	// Rewinding again changes nothing.
	f.rewind()
	if got, want := f.offset(), f.before(3); got != want {
		t.Errorf("offset after a second Rewind = %+v, want %+v", got, want)
	}
}

func TestOutboxMaintenanceRewindNeverMovesForward(t *testing.T) {
	t.Parallel()
	f := newRelayFixture(t)

	f.setOffset(f.rows[1]) // forwarded ev-1, ev-2 only: behind the first pending row
	if got := f.rewind(); got != 0 {
		t.Errorf("Rewind from behind = %d, want 0", got)
	}
	if got := f.offset(); got != f.rows[1] {
		t.Errorf("Rewind moved the offset forward from %+v to %+v", f.rows[1], got)
	}

	f.setOffset(position{tx: "0", offset: 0}) // the forwarder's initial position
	f.rewind()
	if got := f.offset(); got != (position{tx: "0", offset: 0}) {
		t.Errorf("Rewind moved the initial offset to %+v", got)
	}
	if got := f.backlog(0); got != 6 {
		t.Errorf("Backlog = %d, want 6", got)
	}
}

func TestOutboxMaintenanceRewindWithNothingPending(t *testing.T) {
	t.Parallel()
	f := newRelayFixture(t)
	mustApply(t, storage.NewProjection(f.pool), incrEvent("ev-4", f.users[3], 1, at(4)))
	f.setOffset(f.rows[5])
	if got := f.rewind(); got != 0 {
		t.Errorf("Rewind = %d, want 0 when every event is applied or dead-lettered", got)
	}
	if got := f.offset(); got != f.rows[5] {
		t.Errorf("offset moved to %+v", got)
	}
}

func TestOutboxMaintenancePrune(t *testing.T) {
	t.Parallel()
	f := newRelayFixture(t)
	ctx := testContext(t)

	// Not forwarded at all: nothing may go, applied or not.
	n, err := f.maint.Prune(ctx, 0, 100)
	if err != nil || n != 0 {
		t.Errorf("Prune without an offsets row = %d, %v; want 0", n, err)
	}

	// Forwarded up to ev-5: ev-1, ev-2 (applied), ev-3 (dead-lettered) and ev-5 (applied)
	// may go; ev-4 (forwarded, not applied) and ev-6 (applied, not forwarded) stay.
	f.setOffset(f.rows[4])
	n, err = f.maint.Prune(ctx, 0, 2)
	if err != nil || n != 2 {
		t.Errorf("Prune(limit 2) = %d, %v; want 2", n, err)
	}
	if got := outboxRows(t, f.pool, 0); fmt.Sprint(got) != "[ev-3 ev-4 ev-5 ev-6]" {
		t.Errorf("after Prune(limit 2): %v, want the oldest two gone", got)
	}
	n, err = f.maint.Prune(ctx, 0, 100)
	if err != nil || n != 2 {
		t.Errorf("Prune = %d, %v; want 2", n, err)
	}
	if got := outboxRows(t, f.pool, 0); fmt.Sprint(got) != "[ev-4 ev-6]" {
		t.Errorf("after Prune: %v, want [ev-4 ev-6]", got)
	}
	if got := outboxRows(t, f.pool, 1); len(got) != 1 {
		t.Errorf("Prune of shard 0 touched shard 1: %v", got)
	}
	if got := f.backlog(0); got != 1 {
		t.Errorf("Backlog after Prune = %d, want 1 (ev-6)", got)
	}
	// The forwarder's offset is untouched.
	if got := f.offset(); got != f.rows[4] {
		t.Errorf("Prune moved the offset to %+v", got)
	}

	// Only the oldest rows are looked at: with ev-4 still on its way at the head, a prune
	// of one row deletes nothing, even though ev-6, forwarded now, is applied.
	f.setOffset(f.rows[5])
	n, err = f.maint.Prune(ctx, 0, 1)
	if err != nil || n != 0 {
		t.Errorf("Prune(limit 1) behind an unapplied row = %d, %v; want 0", n, err)
	}
	n, err = f.maint.Prune(ctx, 0, 2)
	if err != nil || n != 1 {
		t.Errorf("Prune(limit 2) = %d, %v; want 1", n, err)
	}
	if got := outboxRows(t, f.pool, 0); fmt.Sprint(got) != "[ev-4]" {
		t.Errorf("after Prune(limit 2): %v, want [ev-4]", got)
	}
}

// TestRelayReadRangeScansInItsGenericPlan: the relay's read is a prepared statement, and
// PostgreSQL soon runs it with a generic plan; that plan must start the primary key's scan
// at the relay's position (an index condition), not walk every row the table still holds
// and filter them (what forwarded rows waiting for their prune cost on every read).
func TestRelayReadRangeScansInItsGenericPlan(t *testing.T) {
	text := genericPlan(t, storage.RelayReadSQL, "500")
	if !strings.Contains(text, `Index Cond: (ROW(transaction_id, "offset") >`) {
		t.Fatalf("the generic plan of the relay's read does not start at the position:\n%s", text)
	}
}

// TestPruneScansOnlyTheOldestRowsInItsGenericPlan: the prune's generic plan walks the
// primary key from its start up to the relay's position and stops after the limit; it
// does not gather (and sort) every forwarded row, which costs a history lookup each while
// the projector lags. It deletes the rows it chose by a TID scan: it does not scan the
// whole table (every row still there, and the dead ones) to find them again.
func TestPruneScansOnlyTheOldestRowsInItsGenericPlan(t *testing.T) {
	text := genericPlan(t, storage.PruneSQL, "5000")
	if !strings.Contains(text, `Index Cond: (ROW(transaction_id, "offset") <=`) || !strings.Contains(text, "Limit") || strings.Contains(text, "Sort") {
		t.Fatalf("the generic plan of the prune does not walk the oldest rows in the key's order:\n%s", text)
	}
	if table := strings.Trim(outboxTable(0), `"`); !strings.Contains(text, "Tid Scan on "+table) || strings.Contains(text, "Seq Scan on "+table) {
		t.Fatalf("the generic plan of the prune does not delete the rows it chose by their ctid:\n%s", text)
	}
}

// TestPruneFindsDeadLettersByIndexInItsPlans: the prune, in its generic plan and in those
// of its first runs, finds a row's dead letters through an index however many there are,
// for a message without a user or an event id (another producer's, requeued) too, which
// its uuid names (a requeue gives one to a message that had none). Without the index on
// the dead letters' uuid, each such row scanned every dead letter: a flood of 10,000,
// requeued and dead-lettered again, made a prune of 2,000 rows take ten seconds, every
// 5 s; with the flood's empty uuids in the index, PostgreSQL planned that scan anyway. The
// prune still deletes them all.
func TestPruneFindsDeadLettersByIndexInItsPlans(t *testing.T) {
	f := planFixture(t)
	ctx := testContext(t)
	admin := storage.NewDeadLetterAdmin(f.db, storage.NewOutboxSchema(), testShards)
	if _, err := f.pool.Exec(ctx, `INSERT INTO dead_letters (uuid, payload, metadata, reason, topic, handler, subscriber)
		SELECT '', '\xff00'::bytea || int4send(g), '{}', 'decode ScoreSubmitted: invalid character', 'leaderboard.score-events', 'apply-score', 'kafka'
		FROM generate_series(1, 10000) g`); err != nil {
		t.Fatal(err)
	}
	ids, err := admin.RequeueMatching(ctx, storage.DeadLetterFilter{Topic: "leaderboard.score-events", Limit: 2000}, "ops")
	if err != nil || len(ids) != 2000 {
		t.Fatalf("requeue: %d, %v", len(ids), err)
	}
	// The relay forwards them; each fails again and is dead-lettered once more.
	requeued := map[int]int64{}
	for shard := range testShards {
		if _, err := f.pool.Exec(ctx, `INSERT INTO `+offsetsTable(shard)+` (consumer_group, offset_acked, last_processed_transaction_id)
			SELECT $1, max("offset"), max(transaction_id::text)::xid8 FROM `+outboxTable(shard)+`
			ON CONFLICT (consumer_group) DO UPDATE SET offset_acked = excluded.offset_acked, last_processed_transaction_id = excluded.last_processed_transaction_id`,
			storage.RelayConsumerGroup); err != nil {
			t.Fatal(err)
		}
		tag, err := f.pool.Exec(ctx, `INSERT INTO dead_letters (uuid, payload, metadata, reason, topic, handler, subscriber, attempts)
			SELECT payload->>'uuid', '\xff00', '{}', 'decode ScoreSubmitted: invalid character', 'leaderboard.score-events', 'apply-score', 'kafka', 2
			FROM `+outboxTable(shard)+` WHERE payload->>'destination_topic' IS NOT NULL`)
		if err != nil {
			t.Fatal(err)
		}
		requeued[shard] = tag.RowsAffected()
	}
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		text := explainPlan(t, f, mode, storage.PruneSQL, "(text, int)", "('"+storage.RelayConsumerGroup+"', 5000)")
		if strings.Contains(text, "Seq Scan on dead_letters") || !strings.Contains(text, "dead_letters_uuid") {
			t.Fatalf("the plan of the prune (%s) does not find dead letters by index:\n%s", mode, text)
		}
	}
	// Shard 0's oldest rows are the fixture's, on their way: its prune stops at them.
	maint := storage.NewOutboxMaintenance(f.pool, storage.NewOutboxSchema())
	for shard := 1; shard < testShards; shard++ {
		if n, err := maint.Prune(ctx, shard, 5000); err != nil || n != requeued[shard] || n == 0 {
			t.Errorf("the prune of shard %d: %d rows (%v), want the %d requeued and dead-lettered again", shard, n, err, requeued[shard])
		}
	}
}

// TestDeleteForwardedFindsRowsByKeyInItsGenericPlan: the projector's delete of the rows it
// applied looks each one up by the primary key and deletes it by a TID scan; it scans no
// table whole, however many rows the table holds.
func TestDeleteForwardedFindsRowsByKeyInItsGenericPlan(t *testing.T) {
	text := genericPlanOf(t, func(msgs, _ string) string { return storage.DeleteForwardedSQL(msgs) },
		"(text[], bigint[], text[])", "('{1}', '{1}', '{ev-1}')")
	table := strings.Trim(outboxTable(0), `"`)
	if !strings.Contains(text, "Index Scan using "+table+"_pkey") || !strings.Contains(text, "Tid Scan on "+table) || strings.Contains(text, "Seq Scan") {
		t.Fatalf("the generic plan of the projector's delete does not find the rows by key:\n%s", text)
	}
}

// genericPlan fills shard 0's outbox with 400 commands and 20,000 filler rows, prepares
// statement (given the shard's messages and offsets tables; $1 the relay's consumer group,
// $2 a limit) and returns EXPLAIN of its generic plan run with limit.
func genericPlan(t *testing.T, statement func(msgs, offs string) string, limit string) string {
	t.Helper()
	return genericPlanOf(t, statement, "(text, int)", "('"+storage.RelayConsumerGroup+"', "+limit+")")
}

// genericPlanOf is genericPlan for a statement of the given parameter types, explained
// with the given arguments.
func genericPlanOf(t *testing.T, statement func(msgs, offs string) string, types, args string) string {
	t.Helper()
	return explainGeneric(t, planFixture(t), statement, types, args)
}

// planFixture is an outbox whose shard 0 holds 400 commands and 20,000 filler rows.
func planFixture(t *testing.T) *outboxFixture {
	t.Helper()
	f := newOutboxFixture(t)
	ctx := testContext(t)
	users := usersOfShard(t, 0, 50)
	for i := range 400 {
		f.accept(command(fmt.Sprintf("plan-%d", i), users[i%len(users)], "b"))
	}
	// The size of a shard's table at a few thousand writes a second: the plans of a table of
	// a few pages differ (a sequential scan of it costs less than anything else).
	if _, err := f.pool.Exec(ctx, `INSERT INTO `+outboxTable(0)+` (uuid, payload, metadata, transaction_id)
		SELECT 'filler-' || g, '{}', '{}', pg_current_xact_id() FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	return f
}

// explainGeneric prepares statement on shard 0 of f's outbox and returns EXPLAIN of its
// generic plan run with args, the tables analyzed first.
func explainGeneric(t *testing.T, f *outboxFixture, statement func(msgs, offs string) string, types, args string) string {
	t.Helper()
	return explainPlan(t, f, "force_generic_plan", statement, types, args)
}

// explainPlan is explainGeneric with the plan cache mode given: force_generic_plan, or
// force_custom_plan for the plans of a statement's first runs (planned for its arguments).
func explainPlan(t *testing.T, f *outboxFixture, mode string, statement func(msgs, offs string) string, types, args string) string {
	t.Helper()
	ctx := testContext(t)
	schema := storage.NewOutboxSchema()
	topic := schema.Topic(0)
	if _, err := f.pool.Exec(ctx, `ANALYZE `+outboxTable(0)+`, dead_letters`); err != nil {
		t.Fatal(err)
	}
	conn, err := f.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	defer conn.Conn().Close(ctx) //nolint:errcheck // its session settings and statement stay out of the pool
	for _, q := range []string{
		`SET plan_cache_mode = ` + mode,
		`PREPARE planned` + types + ` AS ` + statement(schema.Messages.MessagesTable(topic), schema.Offsets.MessagesOffsetsTable(topic)),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE planned`+args)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// TestRelayClaimAcksAsynchronously: a claim's acks commit without waiting for the WAL to
// reach the disk (an ack lost in a crash is only a redelivery the projector recognises),
// and that setting stays on the claim's own session.
func TestRelayClaimAcksAsynchronously(t *testing.T) {
	f := newRelayFixture(t)
	ctx := testContext(t)
	claim, err := f.maint.Claim(ctx, f.shard)
	if err != nil || claim == nil {
		t.Fatalf("Claim: %v, %v", claim, err)
	}
	defer claim.Close()
	setting := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		var s string
		if err := q.QueryRow(ctx, "SHOW synchronous_commit").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := setting(storage.ClaimSession(claim)); got != "off" {
		t.Errorf("the claim's session has synchronous_commit %s, want off", got)
	}
	if got := setting(f.pool); got != "on" {
		t.Errorf("another session of the pool has synchronous_commit %s, want on: the claim's setting leaked", got)
	}
	// The rows may be held back (pending) while a transaction of another test is open
	// anywhere on the server: the relay's rule. The first row can come while the second
	// still waits (each was accepted in its own transaction), so read again, from the
	// unacknowledged position, until both come.
	var msgs []*message.Message
	for deadline := time.Now().Add(30 * time.Second); len(msgs) < 2; time.Sleep(20 * time.Millisecond) {
		if msgs, _, err = claim.Read(ctx, 2); err != nil || time.Now().After(deadline) {
			t.Fatalf("Read: %d messages, %v; want 2", len(msgs), err)
		}
	}
	if err := claim.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.offset(); got != f.rows[1] {
		t.Errorf("after the ack the position is %v, want %v (the second row)", got, f.rows[1])
	}
}

// TestRewindAndPruneDoNotReadThePlayersMetadata: the prune and the rewind take a plain
// outbox row's user from the row's own metadata, never from the command's, which is the
// player's JSON: a command of alice's whose metadata says {"partition_key": "bob"}, once
// bob applied an event with the same id, is still alice's pending command (the rewind goes
// back to it, the prune keeps it). Read from the player's metadata, it was pruned as
// applied, and lost had the broker lost it.
func TestRewindAndPruneDoNotReadThePlayersMetadata(t *testing.T) {
	t.Parallel()
	users := usersOfShard(t, 0, 2)
	alice, bob := users[0], users[1]
	f := &relayFixture{outboxFixture: newOutboxFixture(t), shard: 0}
	f.maint = storage.NewOutboxMaintenance(f.pool, storage.NewOutboxSchema())
	ctx := testContext(t)

	body := fmt.Sprintf(`{"event_id":"match-9","board":"global","period":"all_time","user_id":%q,"value":5,"metadata":{"partition_key":%q},"occurred_at":"2026-01-01T00:00:00Z"}`, alice, bob)
	if got := f.accept(command("match-9", alice, body)); got != storage.Accepted {
		t.Fatalf("Accept = %v", got)
	}
	var p position
	if err := f.pool.QueryRow(ctx, `SELECT transaction_id::text, "offset" FROM `+outboxTable(0)+` WHERE uuid = 'match-9'`).Scan(&p.tx, &p.offset); err != nil {
		t.Fatal(err)
	}
	// Bob's own event match-9 is applied; alice's is forwarded (the relay acked it) and
	// not applied.
	mustApply(t, storage.NewProjection(f.pool), bestEvent("match-9", bob, 7, at(1)))
	f.setOffset(p)

	if n := f.rewind(); n != 1 {
		t.Errorf("Rewind = %d rows, want 1: alice's match-9 was never applied", n)
	}
	f.setOffset(p)
	if n, err := f.maint.Prune(ctx, 0, 100); err != nil || n != 0 {
		t.Errorf("Prune = %d, %v; want 0: it deleted alice's unapplied command", n, err)
	}
}

// TestDeletedDeadLetterStaysDeleted: an admin deletes a dead letter (discards the command)
// before the relay's prune deleted its outbox row (every PruneInterval, and never while
// more than 5,000 unapplied rows sit at the head of the shard). Its outbox row goes with
// it: left behind, it was neither applied nor dead-lettered, and every relay start's
// Rewind went back to it and forwarded it again (poisoned again, or applied once a fix was
// deployed).
func TestDeletedDeadLetterStaysDeleted(t *testing.T) {
	t.Parallel()
	f := newRelayFixture(t) // ev-3 is dead-lettered, ev-4 pending
	ctx := testContext(t)
	mustApply(t, storage.NewProjection(f.pool), incrEvent("ev-4", f.users[3], 1, at(4)))
	f.setOffset(f.rows[5]) // all forwarded
	if n := f.rewind(); n != 0 {
		t.Fatalf("Rewind before the delete = %d, want 0", n)
	}
	var id int64
	if err := f.pool.QueryRow(ctx, `SELECT id FROM dead_letters WHERE event_id = 'ev-3'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := storage.NewDeadLetterAdmin(f.db, storage.NewOutboxSchema(), testShards).Delete(ctx, id, "admin"); err != nil {
		t.Fatal(err)
	}
	if n := f.rewind(); n != 0 {
		t.Errorf("Rewind after the admin discarded ev-3 = %d rows forwarded again (from %v), want 0", n, outboxRows(t, f.pool, 0))
	}
}

// TestOldDeadLetterSaysNothingOfANewerCommand: ev-3 of a user is dead-lettered; once the
// request log forgot the event id, the user's game reuses it for a new command. The old
// letter does not make the new command's row look done: the relay's rewind forwards it
// again (a broker that lost it), the prune keeps it, and an admin's delete of the old
// letter leaves it on its way (it dropped the row of a write answered 202).
func TestOldDeadLetterSaysNothingOfANewerCommand(t *testing.T) {
	t.Parallel()
	f := newRelayFixture(t) // ev-3 is dead-lettered, ev-4 pending
	ctx := testContext(t)
	mustApply(t, storage.NewProjection(f.pool), incrEvent("ev-4", f.users[3], 1, at(4)))
	if _, err := f.pool.Exec(ctx, `DELETE FROM score_requests WHERE event_id = 'ev-3'`); err != nil {
		t.Fatal(err)
	}
	if got := f.accept(command("ev-3", f.users[2], "again")); got != storage.Accepted {
		t.Fatalf("Accept of the reused ev-3 = %v", got)
	}
	var newer position
	if err := f.pool.QueryRow(ctx, `SELECT transaction_id::text, "offset" FROM `+outboxTable(0)+` ORDER BY transaction_id DESC, "offset" DESC LIMIT 1`).Scan(&newer.tx, &newer.offset); err != nil {
		t.Fatal(err)
	}
	f.setOffset(newer) // all forwarded, the new ev-3 too
	if n := f.rewind(); n != 1 {
		t.Errorf("Rewind = %d rows, want 1: the new ev-3 was never applied", n)
	}
	f.setOffset(newer)
	if _, err := f.maint.Prune(ctx, 0, 100); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := f.pool.QueryRow(ctx, `SELECT id FROM dead_letters WHERE event_id = 'ev-3'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := storage.NewDeadLetterAdmin(f.db, storage.NewOutboxSchema(), testShards).Delete(ctx, id, "admin"); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM `+outboxTable(0)+` WHERE uuid = 'ev-3'`).Scan(&left); err != nil || left != 1 {
		t.Errorf("outbox rows of ev-3 after the prune and the old letter's delete: %d (%v), want the new command's: %v", left, err, outboxRows(t, f.pool, 0))
	}
}
