package storage_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/openleaderboard/leaderboard/storage"
	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

// servers are the real PostgreSQL and Redis of the development machine, or of CI through
// LEADERBOARD_TEST_POSTGRES_URL and LEADERBOARD_TEST_REDIS_ADDR. Every test gets its own
// database and key prefix.
var servers = storagetest.FromEnv(os.Getenv)

// testContext is a context that ends with the test and bounds it in time.
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // under -race on a slow shared machine
	t.Cleanup(cancel)
	return ctx
}

// newTestDatabase creates an empty database of its own for the test and returns its URL.
func newTestDatabase(t testing.TB) string {
	t.Helper()
	return servers.NewDatabase(t)
}

// newTestPool returns a small pool on a fresh database of the test, not migrated.
func newTestPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	rawURL := newTestDatabase(t)
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		t.Fatalf("parse %s: %v", rawURL, err)
	}
	cfg.MaxConns = 6
	pool, err := pgxpool.NewWithConfig(testContext(t), cfg)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close) // runs before the database is dropped
	return pool
}

// newMigratedPool returns a pool on a fresh database with the migrations and the
// outbox tables of shards shards applied.
func newMigratedPool(t testing.TB, shards int) *pgxpool.Pool {
	t.Helper()
	pool := newTestPool(t)
	if err := storage.Migrate(testContext(t), pool, storage.NewOutboxSchema(), shards); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool
}

// newTestRedis returns a client and a key prefix of the test's own.
func newTestRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	return servers.NewRedis(t)
}
