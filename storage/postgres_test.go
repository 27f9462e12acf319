package storage_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openleaderboard/leaderboard/storage"
)

func TestOpenPostgresCreatesMissingDatabase(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	name, rawURL := servers.DatabaseURL(t)

	pool, err := storage.OpenPostgres(ctx, rawURL, 2)
	if err != nil {
		t.Fatalf("OpenPostgres on a missing database: %v", err)
	}
	var current string
	err = pool.QueryRow(ctx, `SELECT current_database()`).Scan(&current)
	pool.Close()
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if current != name {
		t.Fatalf("connected to database %q, want %q", current, name)
	}

	// A second start finds the database there and simply connects.
	pool, err = storage.OpenPostgres(ctx, rawURL, 2)
	if err != nil {
		t.Fatalf("OpenPostgres on an existing database: %v", err)
	}
	defer pool.Close()
	if got := pool.Config().MaxConns; got != 2 {
		t.Errorf("MaxConns = %d, want 2", got)
	}
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(testContext(t), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatalf("to_regclass(%s): %v", name, err)
	}
	return ok
}

func TestMigrateIsIdempotentAndCreatesOutboxShards(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pool := newTestPool(t)
	schema := storage.NewOutboxSchema()

	for run := 1; run <= 2; run++ {
		if err := storage.Migrate(ctx, pool, schema, 3); err != nil {
			t.Fatalf("Migrate run %d: %v", run, err)
		}
	}
	for _, table := range []string{"users", "board_entries", "score_history", "score_requests", "dead_letters", "goose_db_version"} {
		if !tableExists(t, pool, table) {
			t.Errorf("table %s missing after Migrate", table)
		}
	}
	for shard := 0; shard < 3; shard++ {
		for _, table := range []string{
			fmt.Sprintf(`"watermill_score_commands_%d"`, shard),
			fmt.Sprintf(`"watermill_offsets_score_commands_%d"`, shard),
		} {
			if !tableExists(t, pool, table) {
				t.Errorf("outbox table %s missing after Migrate with 3 shards", table)
			}
		}
	}
	if tableExists(t, pool, `"watermill_score_commands_3"`) {
		t.Errorf("Migrate with 3 shards created a 4th outbox table")
	}
	var versions int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id = 1`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != 1 {
		t.Errorf("goose_db_version has %d rows for 0001_init, want 1", versions)
	}

	// Growing the shard count later adds the new shards' tables and keeps the old ones.
	if err := storage.Migrate(ctx, pool, schema, 4); err != nil {
		t.Fatalf("Migrate with 4 shards: %v", err)
	}
	if !tableExists(t, pool, `"watermill_score_commands_3"`) || !tableExists(t, pool, `"watermill_offsets_score_commands_3"`) {
		t.Errorf("Migrate with 4 shards did not create shard 3")
	}
}

func TestMigrateConcurrentStarts(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pool := newTestPool(t)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = storage.Migrate(ctx, pool, storage.NewOutboxSchema(), 2)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate %d: %v", i, err)
		}
	}
	if !tableExists(t, pool, "score_history") || !tableExists(t, pool, `"watermill_score_commands_1"`) {
		t.Errorf("tables missing after concurrent Migrate")
	}
	// Processes started together with more shards than the database has race to create
	// the new shards' tables (CREATE TABLE IF NOT EXISTS fails one of two on the catalog).
	errs = make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = storage.Migrate(ctx, pool, storage.NewOutboxSchema(), 12)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate with new shards %d: %v", i, err)
		}
	}
	if !tableExists(t, pool, `"watermill_score_commands_11"`) {
		t.Errorf("shard 11 missing after concurrent Migrate")
	}
}

// TestMigrateAdoptsTheHandWrittenMigrator: a database migrated by the earlier, hand-written
// migrator (schema_migrations) is carried over to goose without running any migration
// twice, and the migrations it had not run yet are applied.
func TestMigrateAdoptsTheHandWrittenMigrator(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pool := newTestPool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE schema_migrations (version TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"0001_init", "0002_admin_audit", "0003_rank_index"} {
		body, err := os.ReadFile("migrations/" + name + ".sql")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, string(body)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO score_requests (event_id, body_hash, user_id, board_id) VALUES ('kept', '\x01', 'u', 'global')`); err != nil {
		t.Fatal(err)
	}
	if err := storage.Migrate(ctx, pool, storage.NewOutboxSchema(), 1); err != nil {
		t.Fatalf("Migrate over the hand-written migrator's database: %v", err)
	}
	if tableExists(t, pool, "schema_migrations") {
		t.Error("schema_migrations is still there")
	}
	var applied string
	if err := pool.QueryRow(ctx, `SELECT string_agg(version_id::text, ',' ORDER BY version_id) FROM goose_db_version WHERE version_id > 0`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	versions := strings.Split(applied, ",")
	if !strings.HasPrefix(applied, "1,2,3,4,") || slices.Index(versions[1:], "1") >= 0 || len(versions) != len(slices.Compact(slices.Clone(versions))) {
		t.Errorf("goose versions %s, want each of 1..4 once", applied)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM score_requests WHERE user_id = 'u' AND event_id = 'kept'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the existing request did not survive 0004 (user-scoped keys): %d, %v", n, err)
	}
}

// TestCheckDroppedShards: lowering the shard count while a shard past it still holds a
// command not applied is refused (no relay would forward it: an accepted command never
// applied); a shard whose rows are applied (waiting for the prune) or empty is no reason
// to refuse.
func TestCheckDroppedShards(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 3)
	ctx := testContext(t)
	schema := storage.NewOutboxSchema()
	table := schema.Messages.MessagesTable(schema.Topic(2))
	if err := storage.CheckDroppedShards(ctx, pool, schema, 2); err != nil {
		t.Fatalf("2 shards while shard 2 is empty: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (uuid, payload, metadata, transaction_id) VALUES ('e-1', '{}', '{"partition_key":"u1"}', pg_current_xact_id())`); err != nil {
		t.Fatal(err)
	}
	err := storage.CheckDroppedShards(ctx, pool, schema, 2)
	if err == nil || !strings.Contains(err.Error(), "shard 2") {
		t.Fatalf("2 shards while shard 2 holds a command not applied: %v", err)
	}
	if err := storage.CheckDroppedShards(ctx, pool, schema, 3); err != nil {
		t.Fatalf("the shards it had: %v", err)
	}
	// Applied: the row only waits for the prune (found by a review: it was refused).
	if _, err := pool.Exec(ctx, `INSERT INTO score_history (event_id, board_id, period, user_id, operator, value, occurred_at)
		VALUES ('e-1', 'global', 'all_time', 'u1', 'best', 5, now())`); err != nil {
		t.Fatal(err)
	}
	if err := storage.CheckDroppedShards(ctx, pool, schema, 2); err != nil {
		t.Fatalf("2 shards while shard 2 holds only an applied command: %v", err)
	}
}

// TestRecordShardCount: an API process records the shard count it writes the outbox with;
// another count is refused while a shard holds a command not applied yet (a user's next
// command would go to another shard and could overtake it), and taken once they are
// applied. (Raising LEADERBOARD_OUTBOX_SHARDS under a backlog put a user's commands in two
// shards, forwarded apart: found by a review.)
func TestRecordShardCount(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 2)
	ctx := testContext(t)
	schema := storage.NewOutboxSchema()
	recorded := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT shards FROM outbox_settings`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := storage.RecordShardCount(ctx, pool, schema, 2); err != nil || recorded() != 2 {
		t.Fatalf("the first count: %v", err)
	}
	if err := storage.RecordShardCount(ctx, pool, schema, 4); err != nil || recorded() != 4 {
		t.Fatalf("another count while the outbox holds nothing: %v", err)
	}
	if err := storage.RecordShardCount(ctx, pool, schema, 2); err != nil || recorded() != 2 {
		t.Fatalf("back: %v", err)
	}
	table := schema.Messages.MessagesTable(schema.Topic(1))
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (uuid, payload, metadata, transaction_id) VALUES ('e-1', '{}', '{"partition_key":"u1"}', pg_current_xact_id())`); err != nil {
		t.Fatal(err)
	}
	err := storage.RecordShardCount(ctx, pool, schema, 4)
	if err == nil || !strings.Contains(err.Error(), "[1]") || recorded() != 2 {
		t.Fatalf("4 shards while shard 1 of 2 holds a command not applied: %v, recorded %d", err, recorded())
	}
	if err := storage.RecordShardCount(ctx, pool, schema, 2); err != nil {
		t.Fatalf("the recorded count while commands wait: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO score_history (event_id, board_id, period, user_id, operator, value, occurred_at)
		VALUES ('e-1', 'global', 'all_time', 'u1', 'best', 5, now())`); err != nil {
		t.Fatal(err)
	}
	if err := storage.RecordShardCount(ctx, pool, schema, 4); err != nil || recorded() != 4 {
		t.Fatalf("4 shards once the command is applied: %v", err)
	}
}
