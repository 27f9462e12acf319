// Package storagetest gives each test a PostgreSQL database and a Redis key prefix of its
// own on the real servers, and removes them when the test ends. Storage tests and the
// component tests of cmd/leaderboard share it.
package storagetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Servers names the PostgreSQL and Redis servers tests run against.
type Servers struct {
	// PostgresAdminURL points at a database the tests may connect to in order to create
	// and drop their own (usually "postgres").
	PostgresAdminURL string
	// RedisAddr is host:port of the Redis server.
	RedisAddr string
}

// FromEnv reads LEADERBOARD_TEST_POSTGRES_URL and LEADERBOARD_TEST_REDIS_ADDR through
// getenv (os.Getenv in tests), defaulting to the local servers of `make test`.
func FromEnv(getenv func(string) string) Servers {
	s := Servers{
		PostgresAdminURL: "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		RedisAddr:        "127.0.0.1:6379",
	}
	if v := getenv("LEADERBOARD_TEST_POSTGRES_URL"); v != "" {
		s.PostgresAdminURL = v
	}
	if v := getenv("LEADERBOARD_TEST_REDIS_ADDR"); v != "" {
		s.RedisAddr = v
	}
	return s
}

// RandomHex returns n random bytes as hex.
func RandomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random: %v", err)
	}
	return hex.EncodeToString(b)
}

// DatabaseURL returns the URL of a fresh database name on the server, without creating
// it (a service under test creates it); the database is dropped when the test ends.
func (s Servers) DatabaseURL(t testing.TB) (name, rawURL string) {
	t.Helper()
	name = "lbtest_" + RandomHex(t, 8)
	u, err := url.Parse(s.PostgresAdminURL)
	if err != nil {
		t.Fatalf("parse LEADERBOARD_TEST_POSTGRES_URL: %v", err)
	}
	u.Path = "/" + name
	t.Cleanup(func() { s.dropDatabase(t, name) })
	return name, u.String()
}

// NewDatabase creates an empty database of the test's own and returns its URL.
func (s Servers) NewDatabase(t testing.TB) string {
	t.Helper()
	name, rawURL := s.DatabaseURL(t)
	s.admin(t, func(ctx context.Context, conn *pgx.Conn) {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Fatalf("create database %s: %v", name, err)
		}
	})
	return rawURL
}

// NewICUDatabase creates an empty database whose default collation is ICU's en-US, which
// does not order text byte by byte ('a' < 'B' < 'b'), as many production servers'
// en_US locales do not; ok is false when the server has no ICU support.
func (s Servers) NewICUDatabase(t testing.TB) (rawURL string, ok bool) {
	t.Helper()
	name, rawURL := s.DatabaseURL(t)
	s.admin(t, func(ctx context.Context, conn *pgx.Conn) {
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_collation WHERE collprovider = 'i')`).Scan(&ok); err != nil {
			t.Fatalf("look for ICU collations: %v", err)
		}
		if !ok {
			return
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+
			" TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"); err != nil {
			t.Fatalf("create ICU database %s: %v", name, err)
		}
	})
	if !ok {
		return "", false
	}
	return rawURL, true
}

func (s Servers) dropDatabase(t testing.TB, name string) {
	s.admin(t, func(ctx context.Context, conn *pgx.Conn) {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
}

// admin runs f on a connection to the server's admin database (PostgresAdminURL).
func (s Servers) admin(t testing.TB, f func(ctx context.Context, conn *pgx.Conn)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.PostgresAdminURL)
	if err != nil {
		t.Fatalf("connect to postgres (is it running at %s?): %v", s.PostgresAdminURL, err)
	}
	defer conn.Close(ctx)
	f(ctx, conn)
}

// NewRedis returns a client and a key prefix of the test's own; every key under the
// prefix is deleted, and the client closed, when the test ends.
func (s Servers) NewRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr, PoolSize: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		t.Fatalf("redis (is it running at %s?): %v", s.RedisAddr, err)
	}
	prefix := "lbtest-" + RandomHex(t, 6)
	t.Cleanup(func() {
		defer rdb.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var keys []string
		// The prefix's keys, and the rate limiter's (redis_rate puts "rate:" before ours).
		for _, match := range []string{prefix + ":*", "rate:" + prefix + ":*"} {
			iter := rdb.Scan(ctx, 0, match, 500).Iterator()
			for iter.Next(ctx) {
				keys = append(keys, iter.Val())
			}
			if err := iter.Err(); err != nil {
				t.Errorf("scan test keys: %v", err)
				return
			}
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("delete test keys: %v", err)
			}
		}
	})
	return rdb, prefix
}

// SyncBuffer is a buffer safe for concurrent use: a log sink that background goroutines
// write while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
