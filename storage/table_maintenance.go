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
	logger   *slog.Logger
}

// NewTableMaintenance covers the board tables and the outbox tables of every shard.
func NewTableMaintenance(pool *pgxpool.Pool, schema OutboxSchema, shards int, interval time.Duration, logger *slog.Logger) *TableMaintenance {
	tables := []string{"board_entries", "users", "score_history", "score_requests", "dead_letters"}
	for shard := 0; shard < shards; shard++ {
		topic := schema.Topic(shard)
		tables = append(tables, schema.Messages.MessagesTable(topic), schema.Offsets.MessagesOffsetsTable(topic))
	}
	return &TableMaintenance{pool: pool, tables: tables, interval: interval, logger: logger}
}

// Run analyzes the tables, then, when autovacuum is off, vacuums and analyzes them every
// interval until ctx ends.
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
	for {
		if err := m.pass(ctx, "VACUUM (ANALYZE)"); err != nil && ctx.Err() == nil {
			m.logger.Warn("table maintenance failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
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
