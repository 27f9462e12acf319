package storage_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestTableMaintenanceAnalyzesATableThatGrew: without autovacuum, a table that fills up
// between two full passes gets fresh statistics within moments, not at the next pass.
func TestTableMaintenanceAnalyzesATableThatGrew(t *testing.T) {
	pool := newMigratedPool(t, 1)
	ctx := testContext(t)
	var autovacuum string
	if err := pool.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum); err != nil {
		t.Fatal(err)
	}
	if autovacuum == "on" {
		t.Skip("this PostgreSQL runs autovacuum, which analyzes the tables itself")
	}
	reltuples := func() float64 {
		var n float64
		if err := pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'users'::regclass`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := storage.NewTableMaintenance(pool, storage.NewOutboxSchema(), 1, time.Hour, 20*time.Millisecond, logger)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	defer func() { stop(); <-done }()
	waitFor(t, 10*time.Second, "the first pass analyzed users", func() bool { return reltuples() == 0 })

	insert := func(from, to int) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		_, err = conn.Exec(ctx, `INSERT INTO users (user_id) SELECT 'u-' || i FROM generate_series($1::int, $2::int) i`, from, to)
		if err == nil { // hand the insert to the cumulative statistics now rather than when the session idles
			_, err = conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	insert(1, 1000)
	waitFor(t, 10*time.Second, "users analyzed with its 1000 rows", func() bool { return reltuples() == 1000 })
	insert(1001, 3500) // more than twice 1000, plus 50
	waitFor(t, 10*time.Second, "users analyzed again with its 3500 rows", func() bool { return reltuples() == 3500 })
	// Growth that leaves the plans right waits for the next full pass.
	insert(3501, 4000)
	time.Sleep(300 * time.Millisecond) // 15 looks
	if n := reltuples(); n != 3500 {
		t.Fatalf("users analyzed at %v rows, before it doubled", n)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
