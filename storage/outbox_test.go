package storage_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/openleaderboard/leaderboard/storage"
)

const testShards = 2

type outboxFixture struct {
	t      *testing.T
	pool   *pgxpool.Pool
	db     *sql.DB
	outbox *storage.Outbox
}

func newOutboxFixture(t *testing.T) *outboxFixture {
	t.Helper()
	pool := newMigratedPool(t, testShards)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	o := storage.NewOutbox(db, storage.NewOutboxSchema(), storage.OutboxConfig{Shards: testShards}, logger)
	t.Cleanup(o.Close) // runs before db.Close and the pool's close
	return &outboxFixture{t: t, pool: pool, db: db, outbox: o}
}

// command is a command with body as its identity; its payload is body itself when that is
// JSON (outbox payloads are), or body as a JSON string.
func command(eventID, user, body string) storage.Command {
	h := sha256.Sum256([]byte(body))
	payload := []byte(body)
	if !json.Valid(payload) {
		payload, _ = json.Marshal(body)
	}
	return storage.Command{
		EventID: eventID, UserID: user, Board: "global", BodyHash: h[:],
		Msg: message.NewMessage(eventID, payload),
	}
}

func (f *outboxFixture) accept(cmd storage.Command) storage.AcceptOutcome {
	f.t.Helper()
	out, err := f.outbox.Accept(testContext(f.t), cmd)
	if err != nil {
		f.t.Fatalf("Accept(%s): %v", cmd.EventID, err)
	}
	return out
}

func outboxTable(shard int) string { return fmt.Sprintf(`"watermill_score_commands_%d"`, shard) }

func offsetsTable(shard int) string {
	return fmt.Sprintf(`"watermill_offsets_score_commands_%d"`, shard)
}

// outboxRows returns the event ids (the message uuids) of a shard's outbox rows, in order.
func outboxRows(t *testing.T, pool *pgxpool.Pool, shard int) []string {
	t.Helper()
	rows, err := pool.Query(testContext(t), `SELECT uuid FROM `+outboxTable(shard)+` ORDER BY transaction_id, "offset"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

func count(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(testContext(t), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestOutboxAcceptWritesOutboxRowAndRequest(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t)
	ctx := testContext(t)
	cmd := command("ev-1", "alice", `{"score":10}`)
	cmd.Msg.Metadata.Set("partition_key", "alice")

	if got := f.accept(cmd); got != storage.Accepted {
		t.Fatalf("Accept = %v, want Accepted", got)
	}
	shard := storage.ShardOf("alice", testShards)
	if ids := outboxRows(t, f.pool, shard); len(ids) != 1 || ids[0] != "ev-1" {
		t.Errorf("shard %d outbox = %v, want [ev-1]", shard, ids)
	}
	if ids := outboxRows(t, f.pool, 1-shard); len(ids) != 0 {
		t.Errorf("the other shard got rows: %v", ids)
	}

	// The row is the message itself (one JSON envelope less than a forwarder's).
	var meta string
	var payload []byte
	err := f.pool.QueryRow(ctx, `SELECT payload::text, metadata->>'partition_key' FROM `+outboxTable(shard)).Scan(&payload, &meta)
	if err != nil {
		t.Fatal(err)
	}
	if string(payload) != `{"score":10}` || meta != "alice" {
		t.Errorf("row = payload %q partition_key %q", payload, meta)
	}

	var hash []byte
	var user, board string
	if err := f.pool.QueryRow(ctx, `SELECT body_hash, user_id, board_id FROM score_requests WHERE event_id = 'ev-1'`).Scan(&hash, &user, &board); err != nil {
		t.Fatalf("score_requests row: %v", err)
	}
	if !bytes.Equal(hash, cmd.BodyHash) || user != "alice" || board != "global" {
		t.Errorf("score_requests = %x %s %s", hash, user, board)
	}
	requests := storage.NewRequestLog(f.pool)
	if got, err := requests.Check(ctx, "alice", "ev-1", cmd.BodyHash); err != nil || got != storage.Duplicate {
		t.Errorf("Check(alice, ev-1, same body) = %v, %v; want Duplicate", got, err)
	}
	other := sha256.Sum256([]byte("another body"))
	if got, err := requests.Check(ctx, "alice", "ev-1", other[:]); err != nil || got != storage.Conflict {
		t.Errorf("Check(alice, ev-1, another body) = %v, %v; want Conflict", got, err)
	}
	if _, err := requests.Check(ctx, "alice", "ev-none", cmd.BodyHash); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Check(unknown) err = %v, want ErrNotFound", err)
	}
	if _, err := requests.Check(ctx, "bob", "ev-1", cmd.BodyHash); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Check(bob, alice's event id) err = %v, want ErrNotFound", err)
	}
	// Writes answered unchanged: recorded once, then told apart like accepted ones.
	for _, c := range []struct {
		user, event string
		hash        []byte
		want        storage.AcceptOutcome
		unchanged   bool
	}{
		{"alice", "u-1", other[:], storage.Accepted, true},  // new: recorded
		{"alice", "u-1", other[:], storage.Duplicate, true}, // its retry
		{"alice", "u-1", cmd.BodyHash, storage.Conflict, true},
		{"alice", "ev-1", cmd.BodyHash, storage.Duplicate, false}, // an accepted write's retry
		{"bob", "u-1", other[:], storage.Accepted, true},          // event ids are the user's
	} {
		got, unchanged, _, err := requests.RecordUnchanged(ctx, c.user, c.event, "global", "all_time", c.hash, t0)
		if err != nil || got != c.want || unchanged != c.unchanged {
			t.Errorf("RecordUnchanged(%s, %s) = %v, unchanged %v, %v; want %v, %v", c.user, c.event, got, unchanged, err, c.want, c.unchanged)
		}
	}
	if was, period, err := requests.WasUnchanged(ctx, "alice", "u-1"); err != nil || !was || period != "all_time" {
		t.Errorf("WasUnchanged(alice, u-1) = %v, %q, %v; want true, all_time (the period it was answered for)", was, period, err)
	}
	if _, _, period, err := requests.RecordUnchanged(ctx, "alice", "u-1", "global", "2026-W20", other[:], t0); err != nil || period != "all_time" {
		t.Errorf("RecordUnchanged of a retry in another period = %q, %v; want the recorded all_time", period, err)
	}
	if was, _, err := requests.WasUnchanged(ctx, "alice", "ev-1"); err != nil || was {
		t.Errorf("WasUnchanged(alice, ev-1) = %v, %v", was, err)
	}
}

func TestOutboxDuplicateAndConflict(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t)
	if got := f.accept(command("ev-1", "bob", "body-a")); got != storage.Accepted {
		t.Fatalf("first Accept = %v", got)
	}
	if got := f.accept(command("ev-1", "bob", "body-a")); got != storage.Duplicate {
		t.Errorf("same event id, same body: %v, want Duplicate", got)
	}
	if got := f.accept(command("ev-1", "bob", "body-b")); got != storage.Conflict {
		t.Errorf("same event id, other body: %v, want Conflict", got)
	}
	// Event ids are scoped by user: another user's ev-1 is a command of its own.
	if got := f.accept(command("ev-1", "someone-else", "body-c")); got != storage.Accepted {
		t.Errorf("same event id from another user: %v, want Accepted", got)
	}
	total := len(outboxRows(t, f.pool, 0)) + len(outboxRows(t, f.pool, 1))
	if total != 2 {
		t.Errorf("outbox rows = %d, want 2", total)
	}
	var hash []byte
	if err := f.pool.QueryRow(testContext(t), `SELECT body_hash FROM score_requests WHERE event_id = 'ev-1' AND user_id = 'bob'`).Scan(&hash); err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256([]byte("body-a")); !bytes.Equal(hash, want[:]) {
		t.Errorf("the recorded hash changed to %x", hash)
	}
}

// Retries of one request race each other (a client timing out and retrying): exactly
// one is accepted, and every other is a duplicate or a conflict by its body.
func TestOutboxConcurrentSameEventID(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t)
	ctx := testContext(t)
	const n = 30
	outcomes := make([]storage.AcceptOutcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := "body-a"
			if i%3 == 0 {
				body = "body-b"
			}
			outcomes[i], errs[i] = f.outbox.Accept(ctx, command("ev-race", "carol", body))
		}()
	}
	wg.Wait()
	var stored []byte
	if err := f.pool.QueryRow(ctx, `SELECT body_hash FROM score_requests WHERE event_id = 'ev-race'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Accept %d: %v", i, errs[i])
		}
		body := "body-a"
		if i%3 == 0 {
			body = "body-b"
		}
		h := sha256.Sum256([]byte(body))
		switch {
		case outcomes[i] == storage.Accepted:
			accepted++
			if !bytes.Equal(h[:], stored) {
				t.Errorf("Accept %d accepted a body whose hash is not the recorded one", i)
			}
		case bytes.Equal(h[:], stored) && outcomes[i] != storage.Duplicate:
			t.Errorf("Accept %d with the recorded body: %v, want Duplicate", i, outcomes[i])
		case !bytes.Equal(h[:], stored) && outcomes[i] != storage.Conflict:
			t.Errorf("Accept %d with another body: %v, want Conflict", i, outcomes[i])
		}
	}
	if accepted != 1 {
		t.Errorf("%d Accepted, want exactly 1", accepted)
	}
	if ids := outboxRows(t, f.pool, storage.ShardOf("carol", testShards)); len(ids) != 1 {
		t.Errorf("outbox rows = %v, want one", ids)
	}
}

// TestOutboxConcurrentAccepts: concurrent accepts of users on every shard, gathered into
// shared transactions, land once each in their user's shard table, and every shard written
// is woken.
func TestOutboxConcurrentAccepts(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t)
	ctx := testContext(t)
	listener, err := f.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, "LISTEN "+storage.OutboxChannel); err != nil {
		t.Fatal(err)
	}
	const n = 200
	errs := make([]error, n)
	outcomes := make([]storage.AcceptOutcome, n)
	perShard := make([]int, testShards)
	var wg sync.WaitGroup
	for i := range n {
		user := fmt.Sprintf("user-%d", i%37)
		perShard[storage.ShardOf(user, testShards)]++
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcomes[i], errs[i] = f.outbox.Accept(ctx, command(fmt.Sprintf("ev-%03d", i), user, fmt.Sprintf(`{"i":%d}`, i)))
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || outcomes[i] != storage.Accepted {
			t.Errorf("Accept %d = %v, %v; want Accepted", i, outcomes[i], errs[i])
		}
	}
	seen := map[string]bool{}
	for shard := range testShards {
		ids := outboxRows(t, f.pool, shard)
		if len(ids) != perShard[shard] {
			t.Errorf("shard %d has %d rows, want %d", shard, len(ids), perShard[shard])
		}
		for _, id := range ids {
			if seen[id] {
				t.Errorf("event %s in the outbox twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != n {
		t.Errorf("outbox holds %d distinct events, want %d", len(seen), n)
	}
	if got := count(t, f.pool, `SELECT count(*) FROM score_requests`); got != n {
		t.Errorf("score_requests has %d rows, want %d", got, n)
	}
	woken := map[string]bool{}
	for len(woken) < testShards {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		note, err := listener.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("shards woken: %v, then %v", woken, err)
		}
		woken[note.Payload] = true
	}
	for shard := range testShards {
		if !woken[fmt.Sprint(shard)] {
			t.Errorf("shard %d was never woken (woken: %v)", shard, woken)
		}
	}
}

func TestOutboxShardOfIsStableAndInRange(t *testing.T) {
	t.Parallel()
	used := map[int]bool{}
	for i := range 100 {
		u := fmt.Sprintf("player-%d", i)
		s := storage.ShardOf(u, 4)
		if s < 0 || s >= 4 {
			t.Fatalf("ShardOf(%s, 4) = %d", u, s)
		}
		if s != storage.ShardOf(u, 4) {
			t.Fatalf("ShardOf(%s) is not stable", u)
		}
		used[s] = true
		if got := storage.ShardOf(u, 1); got != 0 {
			t.Fatalf("ShardOf(%s, 1) = %d", u, got)
		}
	}
	if len(used) != 4 {
		t.Errorf("100 users use only shards %v of 4", used)
	}
}

func TestOutboxAcceptAfterCloseIsUnavailable(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t)
	f.accept(command("ev-before", "dave", "x"))
	f.outbox.Close()
	f.outbox.Close() // a second Close is harmless

	_, err := f.outbox.Accept(testContext(t), command("ev-after", "dave", "y"))
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Accept after Close: err = %v, want one wrapping ErrUnavailable", err)
	}
	if got := count(t, f.pool, `SELECT count(*) FROM score_requests WHERE event_id = 'ev-after'`); got != 0 {
		t.Errorf("a command refused after Close was recorded")
	}
}

// Close commits what is queued: commands waiting behind a shard's transaction when Close is
// called are all committed (none lost or left hanging), and a command after Close is
// refused as unavailable.
func TestOutboxCloseCommitsWhatIsQueued(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t)
	ctx := testContext(t)
	release := f.blockShard(ctx, "erin")
	const n = 20
	errs := make([]error, n)
	outcomes := make([]storage.AcceptOutcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcomes[i], errs[i] = f.outbox.Accept(ctx, command(fmt.Sprintf("ev-%d", i), "erin", "b"))
		}()
	}
	f.waitQueued(ctx, n)
	closed := make(chan struct{})
	go func() { f.outbox.Close(); close(closed) }()
	release()
	wg.Wait()
	<-closed
	for i := range n {
		if errs[i] != nil || outcomes[i] != storage.Accepted {
			t.Errorf("queued Accept %d = %v, %v; want Accepted", i, outcomes[i], errs[i])
		}
	}
	if rows := len(outboxRows(t, f.pool, storage.ShardOf("erin", testShards))); rows != n+1 {
		t.Errorf("%d outbox rows, want %d (the blocker and the queued commands)", rows, n+1)
	}
	if _, err := f.outbox.Accept(ctx, command("ev-late", "erin", "b")); !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Accept after Close: %v, want ErrUnavailable", err)
	}
}

// waitQueued waits until n commands are queued in the outbox.
func (f *outboxFixture) waitQueued(ctx context.Context, n int) {
	f.t.Helper()
	for f.outbox.Queued() < n {
		select {
		case <-ctx.Done():
			f.t.Fatal(ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// blockShard holds a row lock that the next transaction of user's shard needs, sends one
// command of user into it, and returns once that transaction waits on the lock; the
// returned func lets it go.
func (f *outboxFixture) blockShard(ctx context.Context, user string) (release func()) {
	f.t.Helper()
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO score_requests (event_id, body_hash, user_id, board_id) VALUES ('blocker', '\x00', $1, 'global')`, user); err != nil {
		f.t.Fatal(err)
	}
	blocker := make(chan error, 1)
	go func() {
		_, err := f.outbox.Accept(ctx, command("blocker", user, "x"))
		blocker <- err
	}()
	for count(f.t, f.pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 0 {
		select {
		case err := <-blocker:
			f.t.Fatalf("the blocking Accept returned early: %v", err)
		case <-ctx.Done():
			f.t.Fatal(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return func() {
		if err := tx.Rollback(ctx); err != nil {
			f.t.Fatal(err)
		}
		if err := <-blocker; err != nil {
			f.t.Fatalf("blocker: %v", err)
		}
	}
}

// Group commit: while a shard's transaction waits, the commands queued behind it are
// committed together in the next one. Holding a row lock that the first command needs
// makes the retries of one event id pile up in a single batch: the first wins, the
// others are answered from it, and only one message is published.
func TestOutboxSameEventIDInOneBatch(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t)
	ctx := testContext(t)
	release := f.blockShard(ctx, "erin")

	const n = 12
	outcomes := make([]storage.AcceptOutcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := "body-a"
			if i%2 == 1 {
				body = "body-b"
			}
			outcomes[i], errs[i] = f.outbox.Accept(ctx, command("ev-batch", "erin", body))
		}()
	}
	f.waitQueued(ctx, n) // all of them wait behind the blocked transaction
	release()
	wg.Wait()
	var stored []byte
	if err := f.pool.QueryRow(ctx, `SELECT body_hash FROM score_requests WHERE event_id = 'ev-batch'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Accept %d: %v", i, errs[i])
		}
		body := "body-a"
		if i%2 == 1 {
			body = "body-b"
		}
		h := sha256.Sum256([]byte(body))
		same := bytes.Equal(h[:], stored)
		switch {
		case outcomes[i] == storage.Accepted:
			accepted++
		case same && outcomes[i] != storage.Duplicate:
			t.Errorf("Accept %d with the recorded body: %v, want Duplicate", i, outcomes[i])
		case !same && outcomes[i] != storage.Conflict:
			t.Errorf("Accept %d with another body: %v, want Conflict", i, outcomes[i])
		}
	}
	if accepted != 1 {
		t.Errorf("%d Accepted for one event id, want 1", accepted)
	}
	ids := outboxRows(t, f.pool, storage.ShardOf("erin", testShards))
	if fmt.Sprint(ids) != "[blocker ev-batch]" {
		t.Errorf("outbox rows = %v, want [blocker ev-batch]", ids)
	}
}

// A transaction that fails after its request log insert (here an outbox insert a
// trigger refuses) leaves nothing behind and is ended at once, not left open on an idle
// connection; the next command commits.
func TestOutboxFailedCommitLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t)
	ctx := testContext(t)
	// Every transaction on the same connection, which stays open while idle (a database/sql
	// handle of its own pool would keep it so).
	f.db.SetMaxOpenConns(1)
	f.db.SetMaxIdleConns(1)
	if _, err := f.pool.Exec(ctx, `CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.uuid = 'poison' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$`); err != nil {
		t.Fatal(err)
	}
	for shard := range testShards {
		if _, err := f.pool.Exec(ctx, `CREATE TRIGGER refuse_poison BEFORE INSERT ON `+outboxTable(shard)+
			` FOR EACH ROW EXECUTE FUNCTION refuse_poison()`); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := f.outbox.Accept(ctx, command("poison", "frank", "body")); err == nil {
		t.Fatalf("Accept(poison) = %v, want the insert's error", out)
	}
	if n := count(t, f.pool, `SELECT count(*) FROM score_requests`); n != 0 {
		t.Fatalf("%d requests recorded by a failed transaction", n)
	}
	// Nothing is left open in the meantime: an open transaction would hold back the relays.
	if n := count(t, f.pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`); n != 0 {
		t.Fatalf("%d transactions left open after the failure", n)
	}
	if out := f.accept(command("ev-after", "frank", "body")); out != storage.Accepted {
		t.Fatalf("Accept after the failure = %v, want Accepted", out)
	}
	if ids := outboxRows(t, f.pool, storage.ShardOf("frank", testShards)); fmt.Sprint(ids) != "[ev-after]" {
		t.Fatalf("outbox rows = %v, want [ev-after]", ids)
	}
}

// TestOutboxLingers: with a linger, commands that come while the first waits share its
// transaction (a full one goes at once, without waiting the linger out).
func TestOutboxLingers(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, testShards)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	var mu sync.Mutex
	var batches []int
	o := storage.NewOutbox(db, storage.NewOutboxSchema(), storage.OutboxConfig{Shards: testShards, MaxBatch: 3, Linger: time.Hour,
		Observe: func(n int, _ time.Duration) { mu.Lock(); batches = append(batches, n); mu.Unlock() }}, slog.New(slog.DiscardHandler))
	t.Cleanup(o.Close)
	ctx := testContext(t)
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			outcome, err := o.Accept(ctx, command(fmt.Sprintf("linger-%d", i), fmt.Sprintf("u%d", i), "b"))
			if err == nil && outcome != storage.Accepted {
				err = fmt.Errorf("outcome %v", outcome)
			}
			errs <- err
		}()
		if i == 0 {
			time.Sleep(100 * time.Millisecond) // the first is taken (without a linger: committed) by now
		}
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(batches) != "[3]" {
		t.Errorf("transactions of %v commands, want one of 3", batches)
	}
}

// A group commit inserts its commands in the order they were queued (one user's commands
// keep their order through the relay), whatever their event ids, and each row is what
// watermill-sql's adapter writes: the message's payload and its metadata as a JSON object.
func TestOutboxKeepsABatchsOrder(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t)
	ctx := testContext(t)
	release := f.blockShard(ctx, "erin")
	const n = 10
	var wg sync.WaitGroup
	errs := make([]error, n)
	want := []string{"blocker"}
	for i := range n {
		id := fmt.Sprintf("ev-%c", 'z'-i) // later commands sort first
		want = append(want, id)
		cmd := command(id, "erin", fmt.Sprintf(`{"n":%d}`, i))
		cmd.Msg.Metadata.Set("correlation_id", "c&<"+id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.outbox.Accept(ctx, cmd)
		}()
		f.waitQueued(ctx, i+1) // queued one after the other
	}
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Accept %d: %v", i, err)
		}
	}
	shard := storage.ShardOf("erin", testShards)
	if got := outboxRows(t, f.pool, shard); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outbox rows %v, want %v", got, want)
	}
	rows, err := f.pool.Query(ctx, `SELECT uuid, payload::text, metadata::text FROM `+outboxTable(shard)+` WHERE uuid <> 'blocker' ORDER BY "offset"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var id, payload, meta string
		if err := rows.Scan(&id, &payload, &meta); err != nil {
			t.Fatal(err)
		}
		wantMeta, _ := json.Marshal(map[string]string{"correlation_id": "c&<" + id, "partition_key": "erin"})
		if payload != fmt.Sprintf(`{"n":%d}`, i) || meta != string(wantMeta) {
			t.Errorf("row %s: payload %s, metadata %s; want {\"n\":%d}, %s", id, payload, meta, i, wantMeta)
		}
		i++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestOutboxRejectedCommandFailsOnlyItself: a command whose payload PostgreSQL cannot take
// (bytes that are not UTF-8, which the API refuses, standing for any gap in its checks)
// fails alone: the other commands gathered into the same group commit are accepted.
func TestOutboxRejectedCommandFailsOnlyItself(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t)
	ctx := testContext(t)
	release := f.blockShard(ctx, "erin")

	var wg sync.WaitGroup
	var goodErr, badErr error
	var goodOut storage.AcceptOutcome
	wg.Add(2)
	go func() {
		defer wg.Done()
		goodOut, goodErr = f.outbox.Accept(ctx, command("good-1", "alice", `{"score": 1}`))
	}()
	f.waitQueued(ctx, 1)
	go func() {
		defer wg.Done()
		_, badErr = f.outbox.Accept(ctx, command("bad-1", "mallory", "{\"metadata\":{\"a\":\"\xff\"}}"))
	}()
	f.waitQueued(ctx, 2) // both wait behind the blocked transaction: one batch
	release()
	wg.Wait()
	if !errors.Is(badErr, storage.ErrRejected) {
		t.Errorf("the bad command: %v, want ErrRejected", badErr)
	}
	if goodErr != nil || goodOut != storage.Accepted {
		t.Fatalf("alice's valid command = %v, %v; want Accepted: another user's bad payload failed the whole batch", goodOut, goodErr)
	}
}
