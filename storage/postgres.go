// Package storage holds the PostgreSQL and Redis stores of the leaderboard.
package storage

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound is returned when the asked-for entry does not exist.
var ErrNotFound = errors.New("not found")

// ErrUnavailable wraps errors caused by a dependency (PostgreSQL or Redis) being unreachable.
var ErrUnavailable = errors.New("dependency unavailable")

// ErrRejected wraps errors PostgreSQL raises about the data itself (SQLSTATE classes 22,
// data exception, and 23, integrity constraint violation): the same statement with the
// same data can never succeed, so retrying is pointless.
var ErrRejected = errors.New("rejected by the database")

// OpenPostgres connects to the database in rawURL, creating the database first when it
// does not exist.
func OpenPostgres(ctx context.Context, rawURL string, maxConns int32) (*pgxpool.Pool, error) {
	if err := ensureDatabase(ctx, rawURL); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.AfterConnect = scanTimesInUTC
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping postgres: %w", err)
	}
	return pool, nil
}

// scanTimesInUTC makes the connection scan timestamptz values in UTC: pgx scans them in the
// process's local zone, and every time the API writes is RFC 3339 UTC (API.md), so a read
// answered from PostgreSQL on a host whose TZ is not UTC wrote "-04:00" where one answered
// from Redis wrote "Z".
func scanTimesInUTC(_ context.Context, conn *pgx.Conn) error {
	conn.TypeMap().RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID, Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})
	return nil
}

func ensureDatabase(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("parse postgres url: %w", err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	// Its own database first: a role a least-privilege or managed server lets reach that
	// database only must not need "postgres" once the database exists.
	own, err := pgx.Connect(ctx, rawURL)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		own.Close(ctx)
		return nil
	case !errors.As(err, &pgErr) || pgErr.Code != "3D000": // anything but invalid_catalog_name (no such database)
		return fmt.Errorf("connect to postgres database %s: %w", name, err)
	}
	admin := *u
	admin.Path = "/postgres"
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // created concurrently by another process
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// unavailable wraps a PostgreSQL error with op, marking connection-level failures (and
// server states such as shutdown or too many connections) with ErrUnavailable so callers
// can answer 503 or retry. Errors from PostgreSQL about the statement itself, and this
// package's own errors, are not marked.
func unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	if isUnavailable(err) {
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	if isRejected(err) {
		return fmt.Errorf("%s: %w: %w", op, ErrRejected, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func isRejected(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23"))
}

func isUnavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57") || strings.HasPrefix(pgErr.Code, "53")
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sql.ErrConnDone) ||
		strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "closed pool")
}
