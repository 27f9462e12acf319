package storage_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/openleaderboard/leaderboard/storage"
)

// Test dependencies: the real PostgreSQL and Redis of the development machine (or of CI,
// through the two variables below). Every test gets its own database and key prefix.
const (
	defaultTestPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	defaultTestRedisAddr   = "127.0.0.1:6379"
)

func testPostgresAdminURL() string {
	if v := os.Getenv("LEADERBOARD_TEST_POSTGRES_URL"); v != "" {
		return v
	}
	return defaultTestPostgresURL
}

func testRedisAddr() string {
	if v := os.Getenv("LEADERBOARD_TEST_REDIS_ADDR"); v != "" {
		return v
	}
	return defaultTestRedisAddr
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random: %v", err)
	}
	return hex.EncodeToString(b)
}

// testContext is a context that ends with the test and bounds it in time.
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newDatabaseName returns a fresh database name and the URL that points at it. The
// database is not created, but it is dropped (if it exists) when the test ends.
func newDatabaseName(t testing.TB) (name, rawURL string) {
	t.Helper()
	name = "lbtest_" + randomHex(t, 8)
	u, err := url.Parse(testPostgresAdminURL())
	if err != nil {
		t.Fatalf("parse admin url: %v", err)
	}
	u.Path = "/" + name
	t.Cleanup(func() { dropDatabase(t, name) })
	return name, u.String()
}

func dropDatabase(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testPostgresAdminURL())
	if err != nil {
		t.Errorf("drop database %s: connect: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("drop database %s: %v", name, err)
	}
}

// newTestDatabase creates an empty database of its own for the test and returns its URL.
func newTestDatabase(t testing.TB) string {
	t.Helper()
	name, rawURL := newDatabaseName(t)
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, testPostgresAdminURL())
	if err != nil {
		t.Fatalf("connect to postgres (is it running at %s?): %v", testPostgresAdminURL(), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	return rawURL
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

// newTestRedis returns a client and a key prefix of the test's own; every key under the
// prefix is deleted when the test ends.
func newTestRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testRedisAddr(), PoolSize: 4})
	ctx := testContext(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		t.Fatalf("redis (is it running at %s?): %v", testRedisAddr(), err)
	}
	prefix := "lbtest_" + randomHex(t, 8)
	t.Cleanup(func() {
		defer rdb.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, prefix+":*", 500).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("scan test keys: %v", err)
			return
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("delete test keys: %v", err)
			}
		}
	})
	return rdb, prefix
}
