package storage_test

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestTableMaintenanceAnalyzesATableThatGrew: without autovacuum, a table that fills up
// between two full passes gets fresh statistics within moments, not at the next pass.
func TestTableMaintenanceAnalyzesATableThatGrew(t *testing.T) {
	pool := newMigratedPool(t, 1)
	ctx := testContext(t)
	skipWithAutovacuum(t, pool)
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
	// Nothing inserted: the looks stop reading every table's statistics (once the
	// database's insert count has settled: an ANALYZE writes pg_statistic).
	waitFor(t, 10*time.Second, "the looks at the tables' statistics stopped", func() bool {
		before := storage.TableMaintenanceLooks(m)
		time.Sleep(300 * time.Millisecond) // 15 looks
		return storage.TableMaintenanceLooks(m) == before
	})
	insert(4001, 4100) // and start again on an insert
	before := storage.TableMaintenanceLooks(m)
	waitFor(t, 10*time.Second, "a look after an insert", func() bool { return storage.TableMaintenanceLooks(m) > before })
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

// TestTableMaintenanceVacuumsWhatIsDue: MaintainDue vacuums a table past autovacuum's
// thresholds of dead or inserted rows, analyzes one past its threshold of changed rows,
// and leaves a table below them alone.
func TestTableMaintenanceVacuumsWhatIsDue(t *testing.T) {
	pool := newMigratedPool(t, 1)
	ctx := testContext(t)
	skipWithAutovacuum(t, pool)
	m := storage.NewTableMaintenance(pool, storage.NewOutboxSchema(), 1, time.Hour, 0, slog.New(slog.DiscardHandler))
	run := func(sql string) {
		t.Helper()
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		// Hand the change to the cumulative statistics now rather than when the session idles.
		if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
	}
	counts := func() (vacuums, analyzes int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT vacuum_count, analyze_count FROM pg_stat_user_tables WHERE relid = 'users'::regclass`).Scan(&vacuums, &analyzes); err != nil {
			t.Fatal(err)
		}
		return vacuums, analyzes
	}
	step := func(sql string, wantVacuum, wantAnalyze bool) {
		t.Helper()
		run(sql)
		v0, a0 := counts()
		if err := m.MaintainDue(ctx); err != nil {
			t.Fatal(err)
		}
		v1, a1 := counts()
		if (v1 > v0) != wantVacuum || (a1 > a0) != wantAnalyze {
			t.Fatalf("after %s: vacuumed %v, analyzed %v; want %v, %v", sql, v1 > v0, a1 > a0, wantVacuum, wantAnalyze)
		}
	}
	run(`INSERT INTO users (user_id) SELECT 'u-' || i FROM generate_series(1, 1000) i`)
	run(`VACUUM (ANALYZE) users`) // 1000 rows: vacuum past 250 dead or 1200 inserted, analyze past 150 changed
	step(`DELETE FROM users WHERE user_id IN (SELECT 'u-' || i FROM generate_series(1, 100) i)`, false, false)
	step(`DELETE FROM users WHERE user_id IN (SELECT 'u-' || i FROM generate_series(101, 200) i)`, false, true)
	step(`DELETE FROM users WHERE user_id IN (SELECT 'u-' || i FROM generate_series(201, 300) i)`, true, false)
	// 700 rows now (the vacuum counted them): insertions are due past 1140.
	step(`INSERT INTO users (user_id) SELECT 'v-' || i FROM generate_series(1, 1100) i`, false, true)
	// 1800 rows (the analyze counted them): past 1360 insertions since the vacuum.
	step(`INSERT INTO users (user_id) SELECT 'w-' || i FROM generate_series(1, 300) i`, true, true)
	// A table's own autovacuum settings replace the defaults: 2100 rows, analyzed as they
	// double (past 50 + 2100 changed), no vacuum for insertions.
	run(`ALTER TABLE users SET (autovacuum_analyze_scale_factor = 1, autovacuum_vacuum_insert_threshold = -1)`)
	step(`INSERT INTO users (user_id) SELECT 'x-' || i FROM generate_series(1, 2000) i`, false, false)
	step(`INSERT INTO users (user_id) SELECT 'y-' || i FROM generate_series(1, 151) i`, false, true)
	// Dead rows still count with the default: past 50 + 20 % of the 4251 rows the analyze
	// counted (an analyze waits for 4301 changes).
	step(`DELETE FROM users WHERE user_id LIKE 'x-%' AND length(user_id) < 5`, false, false)
	step(`DELETE FROM users WHERE user_id LIKE 'x-%'`, true, false)
}

// TestHistoryAndRequestLogAnalyzedAsTheyDouble: the append-only tables carry their own
// analyze threshold and a small statistics sample (migration 0010), which the maintenance
// and autovacuum both read.
func TestHistoryAndRequestLogAnalyzedAsTheyDouble(t *testing.T) {
	pool := newMigratedPool(t, 1)
	ctx := testContext(t)
	rows, err := pool.Query(ctx, `SELECT relname, reloptions FROM pg_class WHERE relname IN ('score_history', 'score_requests') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type opts struct {
		Relname    string
		Reloptions []string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[opts])
	if err != nil {
		t.Fatal(err)
	}
	want := []opts{{"score_history", []string{"autovacuum_analyze_scale_factor=1"}}, {"score_requests", []string{"autovacuum_analyze_scale_factor=1"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("reloptions = %+v, want %+v", got, want)
	}
	// Every column, those added later too, is analyzed from the small sample: one column at
	// the default target sets the sample of the whole table back to 30,000 rows.
	rows, err = pool.Query(ctx, `
		SELECT c.relname || '.' || a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		WHERE c.relname IN ('score_history', 'score_requests') AND a.attnum > 0 AND NOT a.attisdropped
		  AND coalesce(a.attstattarget, -1) <> 10 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	if cols, err := pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(cols) > 0 {
		t.Fatalf("columns analyzed at another statistics target: %v (%v)", cols, err)
	}
}

// skipWithAutovacuum skips a test of the service's own maintenance on a PostgreSQL that
// runs autovacuum: it would vacuum and analyze the tables itself, meanwhile.
func skipWithAutovacuum(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var autovacuum string
	if err := pool.QueryRow(testContext(t), `SHOW autovacuum`).Scan(&autovacuum); err != nil {
		t.Fatal(err)
	}
	if autovacuum == "on" {
		t.Skip("this PostgreSQL runs autovacuum, which vacuums and analyzes the tables itself")
	}
}

// TestTableMaintenancePacedAsAutovacuum: the maintenance's sessions take autovacuum's
// cost-based pace, and give the session back to the pool as they found it.
func TestTableMaintenancePacedAsAutovacuum(t *testing.T) {
	shared := newMigratedPool(t, 1)
	ctx := testContext(t)
	cfg := shared.Config()
	cfg.MaxConns = 1 // one session: the one the maintenance paced comes back
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	show := func(setting string) string {
		t.Helper()
		var v string
		if err := pool.QueryRow(ctx, `SELECT current_setting($1)`, setting).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	wantDelay, wantLimit := show("autovacuum_vacuum_cost_delay"), show("autovacuum_vacuum_cost_limit")
	if wantDelay == "-1" {
		wantDelay = show("vacuum_cost_delay")
	}
	if wantLimit == "-1" {
		wantLimit = show("vacuum_cost_limit")
	}
	before := show("vacuum_cost_delay") + " " + show("vacuum_cost_limit")
	if before == wantDelay+" "+wantLimit {
		t.Skipf("this PostgreSQL paces every VACUUM as autovacuum (%s)", before)
	}
	m := storage.NewTableMaintenance(pool, storage.NewOutboxSchema(), 1, time.Hour, 0, slog.New(slog.DiscardHandler))
	delay, limit, err := storage.TableMaintenancePace(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if delay != wantDelay || limit != wantLimit {
		t.Fatalf("maintenance paced at vacuum_cost_delay %s, vacuum_cost_limit %s; want autovacuum's %s, %s", delay, limit, wantDelay, wantLimit)
	}
	if after := show("vacuum_cost_delay") + " " + show("vacuum_cost_limit"); after != before {
		t.Fatalf("the pool's session came back paced at %s; it was %s", after, before)
	}
}

// TestTableMaintenanceRunsAtItsPace: the maintenance's VACUUM runs on its paced session. At
// a cost limit of 1 (a sleep of at least the cost delay after every page), the vacuum of a
// table of 20 pages takes at least 20 delays; unpaced, a few milliseconds.
func TestTableMaintenanceRunsAtItsPace(t *testing.T) {
	pool := newMigratedPool(t, 1)
	ctx := testContext(t)
	skipWithAutovacuum(t, pool)
	if _, err := pool.Exec(ctx, `INSERT INTO users (user_id) SELECT 'u-' || i FROM generate_series(1, 3000) i`); err != nil {
		t.Fatal(err)
	}
	var pages int
	if err := pool.QueryRow(ctx, `SELECT pg_relation_size('users') / current_setting('block_size')::int`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	m := storage.NewTableMaintenance(pool, storage.NewOutboxSchema(), 1, time.Hour, 0, slog.New(slog.DiscardHandler))
	storage.PaceTableMaintenance(m, "20ms", "1")
	start := time.Now()
	if err := m.MaintainDue(ctx); err != nil { // users: 3000 inserted since its last vacuum, none
		t.Fatal(err)
	}
	took := time.Since(start)
	var vacuums int64
	if err := pool.QueryRow(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'users'::regclass`).Scan(&vacuums); err != nil {
		t.Fatal(err)
	}
	if vacuums == 0 {
		t.Fatal("users was not vacuumed")
	}
	if min := time.Duration(pages) * 20 * time.Millisecond; took < min {
		t.Fatalf("vacuum of %d pages took %s at 20 ms a page or more; want at least %s", pages, took, min)
	}
	t.Logf("%d pages vacuumed and analyzed in %s", pages, took)
}
