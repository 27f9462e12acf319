package storage_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestGroupCommitsOfTwoAPIProcessesDoNotFailEachOther: two API processes (compose runs
// api-1 and api-2) each group-commit their requests. A client that times out and retries
// through the other process puts the same (user, event id) into both processes' batches.
// Two such retries queued in opposite orders made the two request-log inserts wait on each
// other (each INSERT ... ON CONFLICT took the keys in its batch's order): PostgreSQL ended
// one transaction as a deadlock (SQLSTATE 40P01), and that group commit failed every
// command it gathered, here an unrelated player's command in each batch (found by a
// review). The inserts take the keys in one order now: every command is answered.
func TestGroupCommitsOfTwoAPIProcessesDoNotFailEachOther(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pool := newMigratedPool(t, testShards)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	api1 := storage.NewOutbox(db, storage.NewOutboxSchema(), storage.OutboxConfig{Shards: testShards}, logger)
	t.Cleanup(api1.Close)
	api2 := storage.NewOutbox(db, storage.NewOutboxSchema(), storage.OutboxConfig{Shards: testShards}, logger)
	t.Cleanup(api2.Close)

	// The first attempt of a third request, still open, holds its key (as a slow
	// transaction of either process would).
	slow, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // rolled back below
	if _, err := slow.Exec(ctx, `INSERT INTO score_requests (event_id, body_hash, user_id, board_id) VALUES ('ev-x', '\x00', 'xavier', 'global')`); err != nil {
		t.Fatal(err)
	}

	// Each process's committer is busy, so that the commands below gather into one batch
	// each, in the order queued.
	release1 := holdCommitter(ctx, t, pool, api1, "blocker-1")
	release2 := holdCommitter(ctx, t, pool, api2, "blocker-2")
	type result struct {
		out storage.AcceptOutcome
		err error
	}
	queue := func(o *storage.Outbox, cmds ...storage.Command) []chan result {
		var out []chan result
		for _, c := range cmds {
			ch := make(chan result, 1)
			go func() {
				r, err := o.Accept(ctx, c)
				ch <- result{r, err}
			}()
			out = append(out, ch)
			for queued := o.Queued(); queued < len(out); queued = o.Queued() {
				time.Sleep(time.Millisecond)
			}
		}
		return out
	}
	// api-1 gathers alice's request, the retry of xavier's, bob's retry, and carol's own.
	got1 := queue(api1, command("ev-a", "alice", "a"), command("ev-x", "xavier", "x"), command("ev-b", "bob", "b"), command("ev-c", "carol", "c"))
	// api-2 gathers bob's request, xavier's again, alice's retry, and dave's own.
	got2 := queue(api2, command("ev-b", "bob", "b"), command("ev-x", "xavier", "x"), command("ev-a", "alice", "a"), command("ev-d", "dave", "d"))
	release1()
	release2()
	// Both wait on xavier's open first attempt, each having inserted its first key.
	waitLockWaiters(ctx, t, pool, 2)
	if err := slow.Rollback(ctx); err != nil { // xavier's first attempt fails
		t.Fatal(err)
	}

	for name, r := range map[string]result{"carol (api-1)": <-got1[3], "dave (api-2)": <-got2[3]} {
		if r.err != nil || r.out != storage.Accepted {
			t.Errorf("%s's command, in a group commit with nothing wrong about it: %v, %v; want Accepted", name, r.out, r.err)
		}
	}
	for _, chs := range [][]chan result{got1[:3], got2[:3]} {
		for _, ch := range chs {
			<-ch
		}
	}
}

// holdCommitter makes o's committer wait on a lock this test holds (the request log row of
// event id on user "holder"), and returns once it waits; release lets it go.
func holdCommitter(ctx context.Context, t *testing.T, pool *pgxpool.Pool, o *storage.Outbox, event string) (release func()) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO score_requests (event_id, body_hash, user_id, board_id) VALUES ($1, '\x00', 'holder', 'global')`, event); err != nil {
		t.Fatal(err)
	}
	waiting := count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)
	done := make(chan error, 1)
	go func() {
		_, err := o.Accept(ctx, command(event, "holder", "h"))
		done <- err
	}()
	waitLockWaiters(ctx, t, pool, waiting+1)
	return func() {
		t.Helper()
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("holder %s: %v", event, err)
		}
	}
}

// waitLockWaiters waits until n sessions of the test's database wait on a lock.
func waitLockWaiters(ctx context.Context, t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	for count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) < n {
		select {
		case <-ctx.Done():
			t.Fatalf("fewer than %d sessions wait on a lock", n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
