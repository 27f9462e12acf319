package storage

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TableMaintenance keeps planner statistics fresh and dead rows reclaimed on the tables
// the pipeline churns, for PostgreSQL servers that run without autovacuum (common on
// CI and development machines). With autovacuum on, it only analyzes once at start.
//
// Like autovacuum, it works at autovacuum's cost-based pace (autovacuum_vacuum_cost_delay
// and _limit) and without parallel workers, so that it does not compete with live
// traffic: at full speed, with two parallel workers on a table of several indexes, its
// VACUUM and ANALYZE kept a runnable task waiting for the CPU nearly all the time for a
// moment every 15 s on a machine busy with writes.
type TableMaintenance struct {
	pool     *pgxpool.Pool
	tables   []string
	interval time.Duration
	growth   time.Duration
	logger   *slog.Logger
	// costDelay and costLimit, when set (tests), replace autovacuum's pace.
	costDelay, costLimit string
	// inserted is the database's count of inserted rows at the last look for grown
	// tables (-1: none yet); looks counts the looks that read the tables' statistics.
	inserted int64
	looks    atomic.Int64
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
	return &TableMaintenance{pool: pool, tables: tables, interval: interval, growth: growth, logger: logger, inserted: -1}
}

// Run analyzes the tables, then, when autovacuum is off, does what autovacuum would: at
// start a full VACUUM (ANALYZE), then every interval a VACUUM or ANALYZE of each table past
// autovacuum's thresholds (MaintainDue), and in between an ANALYZE of a table as
// soon as it holds more than twice the rows (plus 50) its statistics say. A fresh table
// filling up would otherwise be planned as the empty table it was until the next pass: the
// projector's lookups of a few entries by key become sequential scans of a board that
// grows by thousands of rows a second.
func (m *TableMaintenance) Run(ctx context.Context) error {
	var autovacuum string
	if err := m.pool.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum); err != nil {
		return unavailable("show autovacuum", err)
	}
	if autovacuum == "on" {
		return m.pass(ctx, analyze)
	}
	m.logger.Warn("PostgreSQL runs without autovacuum: the service vacuums and analyzes its own tables", "every", m.interval.String())
	t := time.NewTicker(m.interval)
	defer t.Stop()
	var grown <-chan time.Time
	if m.growth > 0 {
		g := time.NewTicker(m.growth)
		defer g.Stop()
		grown = g.C
	}
	if err := m.pass(ctx, vacuumAnalyze); err != nil && ctx.Err() == nil {
		m.logger.Warn("table maintenance failed", "err", err)
	}
	for {
		for due := false; !due; {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				due = true
			case <-grown:
				if !m.insertedSinceLastLook(ctx) {
					continue
				}
				if err := m.maintain(ctx, true); err != nil && ctx.Err() == nil {
					m.logger.Warn("table maintenance failed", "err", err)
				}
			}
		}
		if err := m.MaintainDue(ctx); err != nil && ctx.Err() == nil {
			m.logger.Warn("table maintenance failed", "err", err)
		}
	}
}

// MaintainDue vacuums and analyzes the tables past autovacuum's thresholds: the table's
// own autovacuum settings, else the server's (by default a vacuum past 50 dead rows plus
// 20 % of the rows or 1000 inserted plus 20 %, an analyze past 50 changed plus 10 %). A
// full pass of every table every interval, as the maintenance did first, re-read the
// history and the request log as they grew: at 4,000 writes/s, 0.15 cores of PostgreSQL
// within three minutes.
func (m *TableMaintenance) MaintainDue(ctx context.Context) error { return m.maintain(ctx, false) }

// insertedSinceLastLook says whether the database counted rows inserted since the last
// look (true when it cannot tell): a table grows only by inserts, so an idle service skips
// the query of every table's statistics it made each second.
func (m *TableMaintenance) insertedSinceLastLook(ctx context.Context) bool {
	var n int64
	if err := m.pool.QueryRow(ctx, `SELECT tup_inserted FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		return true
	}
	changed := n != m.inserted
	m.inserted = n
	return changed
}

// maintain runs on each table what the cumulative statistics say it is due: with
// grownOnly, only the ANALYZE of a table holding more than twice the rows its statistics
// say, plus 50; otherwise what MaintainDue says.
func (m *TableMaintenance) maintain(ctx context.Context, grownOnly bool) error {
	if grownOnly {
		m.looks.Add(1)
	}
	rows, err := m.pool.Query(ctx, dueSQL, m.tables)
	if err != nil {
		return unavailable("find tables due for maintenance", err)
	}
	type due struct {
		table                  string
		vacuum, analyze, grown bool
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (due, error) {
		var d due
		err := r.Scan(&d.table, &d.vacuum, &d.analyze, &d.grown)
		return d, err
	})
	if err != nil {
		return unavailable("find tables due for maintenance", err)
	}
	var commands []string
	for _, d := range tables { // regclass's text is a quoted name
		if grownOnly {
			d.vacuum, d.analyze = false, d.grown
		}
		switch {
		case d.vacuum && d.analyze:
			commands = append(commands, vacuumAnalyze+d.table)
		case d.vacuum:
			commands = append(commands, vacuum+d.table)
		case d.analyze:
			commands = append(commands, analyze+d.table)
		}
	}
	return m.run(ctx, commands)
}

// dueSQL says of each table (argument: their names) whether a vacuum and an analyze are
// due and whether it outgrew its statistics, with autovacuum's thresholds: the table's own
// (ALTER TABLE … SET (autovacuum_…)), else the server's. An insert threshold of -1 turns
// vacuums for insertions off, as it does for autovacuum.
const dueSQL = `
		SELECT s.relid::regclass::text,
		       s.n_dead_tup > o.vt + o.vs * r.n OR (o.it >= 0 AND s.n_ins_since_vacuum > o.it + o.iscale * r.n),
		       s.n_mod_since_analyze > o.at + o.ascale * r.n,
		       s.n_live_tup > 2 * r.n + 50
		FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid,
		LATERAL (SELECT greatest(c.reltuples, 0) AS n) r,
		LATERAL (SELECT
		  coalesce(max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_threshold'), current_setting('autovacuum_vacuum_threshold'))::float8 AS vt,
		  coalesce(max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_scale_factor'), current_setting('autovacuum_vacuum_scale_factor'))::float8 AS vs,
		  coalesce(max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_insert_threshold'), current_setting('autovacuum_vacuum_insert_threshold'))::float8 AS it,
		  coalesce(max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_insert_scale_factor'), current_setting('autovacuum_vacuum_insert_scale_factor'))::float8 AS iscale,
		  coalesce(max(option_value) FILTER (WHERE option_name = 'autovacuum_analyze_threshold'), current_setting('autovacuum_analyze_threshold'))::float8 AS at,
		  coalesce(max(option_value) FILTER (WHERE option_name = 'autovacuum_analyze_scale_factor'), current_setting('autovacuum_analyze_scale_factor'))::float8 AS ascale
		  FROM pg_options_to_table(c.reloptions)) o
		WHERE s.relid = ANY($1::text[]::regclass[])`

// The commands, with no parallel workers for a VACUUM (autovacuum never uses them).
const (
	vacuumAnalyze = "VACUUM (PARALLEL 0, ANALYZE) "
	vacuum        = "VACUUM (PARALLEL 0) "
	analyze       = "ANALYZE "
)

func (m *TableMaintenance) pass(ctx context.Context, command string) error {
	commands := make([]string, 0, len(m.tables))
	for _, table := range m.tables {
		name := table
		if name[0] != '"' {
			name = pgx.Identifier{table}.Sanitize()
		}
		commands = append(commands, command+name)
	}
	return m.run(ctx, commands)
}

// run runs the commands in order on one session paced as autovacuum is.
func (m *TableMaintenance) run(ctx context.Context, commands []string) error {
	if len(commands) == 0 {
		return nil
	}
	conn, release, err := m.session(ctx)
	if err != nil {
		return err
	}
	defer release()
	for _, command := range commands {
		if _, err := conn.Exec(ctx, command); err != nil {
			return unavailable(command, err)
		}
	}
	return nil
}

// session acquires a session with vacuum_cost_delay and vacuum_cost_limit set to
// autovacuum's (VACUUM and ANALYZE both honour them). release hands it back to the pool
// with the settings reset, or closed if the reset failed.
func (m *TableMaintenance) session(ctx context.Context) (conn *pgxpool.Conn, release func(), err error) {
	conn, err = m.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, unavailable("acquire a session for table maintenance", err)
	}
	release = func() {
		if _, err := conn.Exec(ctx, `RESET vacuum_cost_delay; RESET vacuum_cost_limit`); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx)) // the pool drops a closed session
		}
		conn.Release()
	}
	if _, err := conn.Exec(ctx, `
		SELECT set_config('vacuum_cost_delay', coalesce(nullif($1, ''),
		         CASE current_setting('autovacuum_vacuum_cost_delay') WHEN '-1' THEN current_setting('vacuum_cost_delay')
		         ELSE current_setting('autovacuum_vacuum_cost_delay') END), false),
		       set_config('vacuum_cost_limit', coalesce(nullif($2, ''),
		         CASE current_setting('autovacuum_vacuum_cost_limit') WHEN '-1' THEN current_setting('vacuum_cost_limit')
		         ELSE current_setting('autovacuum_vacuum_cost_limit') END), false)`, m.costDelay, m.costLimit); err != nil {
		release()
		return nil, nil, unavailable("pace table maintenance as autovacuum", err)
	}
	return conn, release, nil
}
