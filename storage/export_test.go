package storage

import (
	"context"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

// RelayReadSQL is the relay's read statement, for the test of its plan.
var RelayReadSQL = relayReadSQL

// PruneSQL is the prune's statement, for the test of its plan.
var PruneSQL = pruneSQL

// DeleteForwardedSQL is the projector's delete of the outbox rows it applied, for the test
// of its plan.
var DeleteForwardedSQL = deleteForwardedSQL

// ClaimSession is the session a relay's claim holds its shard's lock on.
func ClaimSession(c OutboxClaim) *pgx.Conn { return c.(*shardClaim).conn }

// TableMaintenanceLooks counts m's looks at the tables' statistics for grown tables.
func TableMaintenanceLooks(m *TableMaintenance) int64 { return m.looks.Load() }

// PaceTableMaintenance replaces autovacuum's pace (vacuum_cost_delay, vacuum_cost_limit)
// in m's sessions.
func PaceTableMaintenance(m *TableMaintenance, costDelay, costLimit string) {
	m.costDelay, m.costLimit = costDelay, costLimit
}

// TableMaintenancePace opens one of m's sessions and says its vacuum_cost_delay and
// vacuum_cost_limit.
func TableMaintenancePace(ctx context.Context, m *TableMaintenance) (delay, limit string, err error) {
	conn, release, err := m.session(ctx)
	if err != nil {
		return "", "", err
	}
	defer release()
	err = conn.QueryRow(ctx, `SELECT current_setting('vacuum_cost_delay'), current_setting('vacuum_cost_limit')`).Scan(&delay, &limit)
	return delay, limit, err
}

// SetBatcherClock sets the clock an adaptive batcher measures its items' rate on; call it
// before the first item is queued (a worker reads it once it has an item).
func SetBatcherClock[T, R any](b *Batcher[T, R], now func() time.Time) { b.now = now }

// LoadLinger is the adaptive batcher's linger at a rate, for its table test.
var LoadLinger = loadLinger

// MigrateTo applies the embedded migrations up to version (and no outbox table).
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	files, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files)
	if err != nil {
		return err
	}
	_, err = p.UpTo(ctx, version)
	return err
}
