package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OutboxMaintenance keeps the outbox honest after crashes and small in steady state.
type OutboxMaintenance struct {
	pool   *pgxpool.Pool
	schema OutboxSchema
}

// NewOutboxMaintenance returns the relay's view of the outbox tables.
func NewOutboxMaintenance(pool *pgxpool.Pool, schema OutboxSchema) *OutboxMaintenance {
	return &OutboxMaintenance{pool: pool, schema: schema}
}

// RelayConsumerGroup is the relay's row in a shard's offsets table (watermill-sql's
// format): the position up to which the shard is forwarded to Kafka.
const RelayConsumerGroup = "leaderboard-relay"

// rowUser and rowEvent are the user and event id of outbox row alias: of the message
// itself, or of the message inside a forwarder envelope (requeued dead letters, and rows
// written before the relay read plain messages). A plain row's payload is a command,
// whose metadata is the player's own JSON: never read there. An empty one is none (NULL),
// as the dead letters store it.
func rowUser(alias string) string {
	return `NULLIF(CASE WHEN ` + isEnvelope(alias) + ` THEN ` + alias + `.payload->'metadata'->>'partition_key' ELSE ` + alias + `.metadata->>'partition_key' END, '')`
}

func rowEvent(alias string) string {
	return `CASE WHEN ` + isEnvelope(alias) + ` THEN ` + alias + `.payload->>'uuid' ELSE ` + alias + `.uuid END`
}

// isEnvelope tells a forwarder envelope (its row's own metadata is empty; its payload
// names a destination_topic) from a command's row, whose own metadata names its user: the
// payload is read only for a row without, as a command's payload, the player's JSON, may
// hold what PostgreSQL's JSON operators cannot read (a \u0000 an earlier build let in),
// and one such row stopped the upkeep of its shard.
func isEnvelope(alias string) string {
	return `(CASE WHEN ` + alias + `.metadata->>'partition_key' IS NOT NULL THEN false ELSE ` + alias + `.payload->>'destination_topic' IS NOT NULL END)`
}

// rowDone is true when the event of outbox row alias was applied, or dead-lettered since
// it was put there: by a dead letter with more attempts than the row carries (a duplicate
// dead letter of a requeued command, as old as the one requeued, says nothing of the
// requeue), written by a later transaction than the row (an old dead letter says nothing
// of a new command that reuses its event id after the request log forgot it). A dead letter is found by its event id or its message uuid (a command's are
// the same; a malformed message another producer put on the topic, requeued, has only
// the uuid, and may have no user), each through an index; an empty one names nothing
// (every message without one has it: a requeue gives it a uuid).
func rowDone(alias string) string {
	u, e, n := rowUser(alias), `NULLIF(`+rowEvent(alias)+`, '')`, rowAttempts(alias)
	x := alias + `.transaction_id`
	return `(EXISTS (SELECT 1 FROM score_history h WHERE h.user_id = ` + u + ` AND h.event_id = ` + e + `)
		OR EXISTS (SELECT 1 FROM dead_letters l WHERE l.user_id = ` + u + ` AND l.event_id = ` + e + ` AND l.attempts > ` + n + ` AND l.tx > ` + x + `)
		OR EXISTS (SELECT 1 FROM dead_letters l WHERE l.uuid = ` + e + ` AND l.uuid <> '' AND l.user_id IS NOT DISTINCT FROM ` + u + ` AND l.attempts > ` + n + ` AND l.tx > ` + x + `))`
}

// rowAttempts is how many times the message of outbox row alias was dead-lettered before
// it was put there: a requeue's envelope carries its dead letter's attempts
// (MetaAttempts), an accepted command none.
func rowAttempts(alias string) string {
	a := alias + `.payload->'metadata'->>'` + MetaAttempts + `'`
	return `CASE WHEN NOT ` + isEnvelope(alias) + ` THEN 0 WHEN ` + a + ` ~ '^[0-9]{1,9}$' THEN (` + a + `)::int ELSE 0 END`
}

// Rewind moves the relay's position of a shard back to the oldest outbox row whose
// event has neither been applied nor dead-lettered, so that everything acknowledged but
// lost on the way (a broker that died with the process) is forwarded again. It never
// moves the position forward. It returns how many rows will be forwarded again.
func (m *OutboxMaintenance) Rewind(ctx context.Context, shard int) (int64, error) {
	topic := m.schema.Topic(shard)
	return rewind(ctx, m.pool, shard, m.schema.Messages.MessagesTable(topic), m.schema.Offsets.MessagesOffsetsTable(topic))
}

// rewind is Rewind of the shard's tables msgs and offs, on q.
func rewind(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, shard int, msgs, offs string) (int64, error) {
	var rewound int64
	err := q.QueryRow(ctx, `
		WITH first_pending AS (
			SELECT o.transaction_id, o."offset" FROM `+msgs+` o
			WHERE NOT `+rowDone("o")+`
			ORDER BY o.transaction_id, o."offset" LIMIT 1
		), moved AS (
			UPDATE `+offs+` f SET last_processed_transaction_id = p.transaction_id, offset_acked = p."offset" - 1
			FROM first_pending p
			WHERE f.consumer_group = $1
			  AND (f.last_processed_transaction_id, f.offset_acked) >= (p.transaction_id, p."offset")
			RETURNING p.transaction_id, p."offset"
		)
		SELECT count(*) FROM `+msgs+` o, moved p WHERE (o.transaction_id, o."offset") >= (p.transaction_id, p."offset")`,
		RelayConsumerGroup).Scan(&rewound)
	if err != nil {
		return 0, unavailable(fmt.Sprintf("rewind outbox shard %d", shard), err)
	}
	return rewound, nil
}

// CheckDroppedShards refuses a shard count below an outbox table that still holds a
// command neither applied nor dead-lettered: no relay would forward it any more, and an
// accepted command would never be applied. Rows applied and waiting for the prune do not
// count. (Shards were always numbered from 0, so the first missing table ends them.) A
// relay runs it at start; an API or projector process, or a maintenance command, need not.
func CheckDroppedShards(ctx context.Context, pool *pgxpool.Pool, outbox OutboxSchema, shards int) error {
	pending, err := pendingShards(ctx, pool, outbox, shards)
	if err != nil || len(pending) == 0 {
		return err
	}
	shard := pending[len(pending)-1]
	return fmt.Errorf("outbox shard %d (%s) holds commands not applied yet, and LEADERBOARD_OUTBOX_SHARDS=%d leaves it to no relay: run with at least %d shards until they are applied, then lower it",
		shard, outbox.Messages.MessagesTable(outbox.Topic(shard)), shards, shard+1)
}

// RecordShardCount records the shard count an API process writes the outbox with, and
// refuses one other than the recorded count while a shard holds a command not applied
// yet: a user's shard depends on the count, so the user's next command would land in
// another table than the one still waiting, forwarded apart from it, and could overtake
// it. An API process runs it at start, after Migrate.
func RecordShardCount(ctx context.Context, pool *pgxpool.Pool, outbox OutboxSchema, shards int) error {
	var recorded int
	err := pool.QueryRow(ctx, `SELECT shards FROM outbox_settings`).Scan(&recorded)
	switch {
	case err == nil && recorded == shards:
		return nil
	case err == nil:
		pending, err := pendingShards(ctx, pool, outbox, 0)
		if err != nil {
			return err
		}
		if len(pending) > 0 {
			return fmt.Errorf("LEADERBOARD_OUTBOX_SHARDS=%d, but the outbox was written with %d shards and shards %v hold commands not applied yet: a user's next command would go to another shard than the one waiting and could be applied before it. Run with %d until they are applied (stop the API processes and let the relay and projector drain the outbox), then change it",
				shards, recorded, pending, recorded)
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("read the outbox's shard count: %w", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_settings (shards) VALUES ($1) ON CONFLICT (id) DO UPDATE SET shards = excluded.shards`, shards); err != nil {
		return fmt.Errorf("record the outbox's shard count: %w", err)
	}
	return nil
}

// pendingShards lists the outbox shards from first on whose table holds a command neither
// applied nor dead-lettered.
func pendingShards(ctx context.Context, pool *pgxpool.Pool, outbox OutboxSchema, first int) ([]int, error) {
	var out []int
	for shard := first; ; shard++ {
		table := outbox.Messages.MessagesTable(outbox.Topic(shard))
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
			return nil, fmt.Errorf("look for outbox shard %d: %w", shard, err)
		}
		if !exists {
			return out, nil
		}
		var pending bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+table+` o
			WHERE NOT `+rowDone("o")+`)`).Scan(&pending); err != nil {
			return nil, fmt.Errorf("outbox shard %d: %w", shard, err)
		}
		if pending {
			out = append(out, shard)
		}
	}
}

// Prune looks at the oldest limit rows of a shard that the relay has passed and deletes
// those whose event the projector has applied (or dead-lettered). It returns how many rows
// it deleted: fewer than limit when one of them is still on its way.
func (m *OutboxMaintenance) Prune(ctx context.Context, shard int, limit int) (int64, error) {
	topic := m.schema.Topic(shard)
	tag, err := m.pool.Exec(ctx, pruneSQL(m.schema.Messages.MessagesTable(topic), m.schema.Offsets.MessagesOffsetsTable(topic)), RelayConsumerGroup, limit)
	if err != nil {
		return 0, unavailable(fmt.Sprintf("prune outbox shard %d", shard), err)
	}
	return tag.RowsAffected(), nil
}

// pruneSQL deletes, of the oldest $2 rows at or before the position of consumer group $1
// in offsets table offs, those whose event is in the history or the dead letters. Only
// the oldest $2 are looked at, in the primary key's order from its start: the cost of a
// prune stays that of $2 rows when the projector lags. Choosing among all forwarded rows
// instead (as the prune did first) looked up the history for every row the projector had
// not reached yet, on every prune: at 4,000 writes/s with a lagging projector that was
// 0.4 s a prune and half a core of PostgreSQL.
//
// The rows are deleted by their ctid, which the chosen rows carry (a row is never updated,
// and none of them can be vacuumed away while this statement's snapshot sees it), so that
// PostgreSQL finds them with a TID scan. Joined back on the primary key instead, PostgreSQL
// hashed the chosen rows and scanned the whole table, dead rows included, for them, so a
// prune cost more the larger the table: 54 ms against 19 ms for 4,000 rows of a table of
// 100,000. At saturation the table stays small, and most of a prune's time is the history
// lookups (about 12 µs of PostgreSQL time per row either way).
func pruneSQL(msgs, offs string) string {
	return `
		WITH pos AS (
			SELECT coalesce((SELECT offset_acked FROM ` + offs + ` WHERE consumer_group = $1), 0) AS o,
			       coalesce((SELECT last_processed_transaction_id FROM ` + offs + ` WHERE consumer_group = $1), '0'::xid8) AS tx
		), oldest AS (
			SELECT m.ctid AS tid, m.transaction_id, m.uuid, m.payload, m.metadata FROM ` + msgs + ` m, pos
			WHERE (m.transaction_id, m."offset") <= (pos.tx, pos.o)
			ORDER BY m.transaction_id, m."offset" LIMIT $2
		)
		DELETE FROM ` + msgs + ` o
		WHERE o.ctid = ANY (ARRAY(
			SELECT d.tid FROM oldest d WHERE ` + rowDone("d") + `))`
}

// Backlog returns how many outbox rows of a shard the relay has not passed yet.
func (m *OutboxMaintenance) Backlog(ctx context.Context, shard int) (int64, error) {
	topic := m.schema.Topic(shard)
	msgs, offs := m.schema.Messages.MessagesTable(topic), m.schema.Offsets.MessagesOffsetsTable(topic)
	var n int64
	err := m.pool.QueryRow(ctx, `
		SELECT count(*) FROM `+msgs+` o
		LEFT JOIN `+offs+` f ON f.consumer_group = $1
		WHERE f.consumer_group IS NULL OR (o.transaction_id, o."offset") > (f.last_processed_transaction_id, f.offset_acked)`,
		RelayConsumerGroup).Scan(&n)
	return n, unavailable("outbox backlog", err)
}

// Outstanding counts the accepted commands waiting in the outbox (not yet forwarded, or
// forwarded and not yet applied and pruned), counting at most upTo+1 per shard so the
// query stays cheap however large the backlog grows.
func (m *OutboxMaintenance) Outstanding(ctx context.Context, shards int, upTo int64) (int64, error) {
	var total int64
	for shard := range shards {
		var n int64
		err := m.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+m.schema.Messages.MessagesTable(m.schema.Topic(shard))+` LIMIT $1) t`, upTo+1).Scan(&n)
		if err != nil {
			return 0, unavailable("outbox outstanding", err)
		}
		total += n
	}
	return total, nil
}
