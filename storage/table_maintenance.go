package storage

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TableMaintenance keeps planner statistics fresh and dead rows reclaimed on the tables
// the pipeline churns, for PostgreSQL servers that run without autovacuum (common on
// CI and development machines). With autovacuum on, it only analyzes once at start.
type TableMaintenance struct {
	pool     *pgxpool.Pool
	tables   []string
	interval time.Duration
	growth   time.Duration
	logger   *slog.Logger
}

// NewTableMaintenance covers the board tables and the outbox tables of every shard: a
// full pass every interval, and a look every growth for a table that outgrew its
// statistics.
func NewTableMaintenance(pool *pgxpool.Pool, schema OutboxSchema, shards int, interval, growth time.Duration, logger *slog.Logger) *TableMaintenance {
	tables := []string{"board_entries", "users", "score_history", "score_requests", "dead_letters"}
	for shard := 0; shard < shards; shard++ {
		topic := schema.Topic(shard)
		tables = append(tables, schema.Messages.MessagesTable(topic), schema.Offsets.MessagesOffsetsTable(topic))
	}
	return &TableMaintenance{pool: pool, tables: tables, interval: interval, growth: growth, logger: logger}
}

// Run analyzes the tables, then, when autovacuum is off, vacuums and analyzes them every
// interval until ctx ends, and in between analyzes a table as soon as it holds more than
// twice the rows (plus 50) its statistics say. A fresh table filling up would otherwise
// be planned as the empty table it was until the next pass: the projector's lookups of a
// few entries by key become sequential scans of a board that grows by thousands of rows
// a second.
func (m *TableMaintenance) Run(ctx context.Context) error {
	var autovacuum string
	if err := m.pool.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum); err != nil {
		return unavailable("show autovacuum", err)
	}
	if autovacuum == "on" {
		return m.pass(ctx, "ANALYZE")
	}
	m.logger.Warn("PostgreSQL runs without autovacuum: the service vacuums and analyzes its own tables", "every", m.interval)
	t := time.NewTicker(m.interval)
	defer t.Stop()
	var grown <-chan time.Time
	if m.growth > 0 {
		g := time.NewTicker(m.growth)
		defer g.Stop()
		grown = g.C
	}
	for {
		if err := m.pass(ctx, "VACUUM (ANALYZE)"); err != nil && ctx.Err() == nil {
			m.logger.Warn("table maintenance failed", "err", err)
		}
		for due := false; !due; {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				due = true
			case <-grown:
				if err := m.analyzeGrown(ctx); err != nil && ctx.Err() == nil {
					m.logger.Warn("table maintenance failed", "err", err)
				}
			}
		}
	}
}

// analyzeGrown analyzes the tables holding more than twice the rows their statistics
// say, plus 50 (live rows as PostgreSQL's cumulative statistics count them).
func (m *TableMaintenance) analyzeGrown(ctx context.Context) error {
	rows, err := m.pool.Query(ctx, `
		SELECT s.relid::regclass::text FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
		WHERE s.relid = ANY($1::text[]::regclass[]) AND s.n_live_tup > 2 * greatest(c.reltuples, 0) + 50`, m.tables)
	if err != nil {
		return unavailable("find grown tables", err)
	}
	grown, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return unavailable("find grown tables", err)
	}
	for _, table := range grown { // regclass's text is a quoted name
		if _, err := m.pool.Exec(ctx, "ANALYZE "+table); err != nil {
			return unavailable("ANALYZE "+table, err)
		}
	}
	return nil
}

func (m *TableMaintenance) pass(ctx context.Context, command string) error {
	for _, table := range m.tables {
		name := table
		if name[0] != '"' {
			name = pgx.Identifier{table}.Sanitize()
		}
		if _, err := m.pool.Exec(ctx, command+" "+name); err != nil {
			return unavailable(fmt.Sprintf("%s %s", command, table), err)
		}
	}
	return nil
}
