package storage

import (
	"context"
	"fmt"

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

// RelayConsumerGroup is the consumer group watermill's forwarder uses on the SQL subscriber.
const RelayConsumerGroup = "leaderboard-relay"

// Rewind moves the forwarder's position of a shard back to the oldest outbox row whose
// event has neither been applied nor dead-lettered, so that everything acknowledged but
// lost on the way (a broker that died with the process) is forwarded again. It never
// moves the position forward. It returns how many rows will be forwarded again.
func (m *OutboxMaintenance) Rewind(ctx context.Context, shard int) (int64, error) {
	topic := m.schema.Topic(shard)
	msgs, offs := m.schema.Messages.MessagesTable(topic), m.schema.Offsets.MessagesOffsetsTable(topic)
	var rewound int64
	err := m.pool.QueryRow(ctx, `
		WITH first_pending AS (
			SELECT o.transaction_id, o."offset" FROM `+msgs+` o
			WHERE NOT EXISTS (SELECT 1 FROM score_history h WHERE h.user_id = o.payload->'metadata'->>'partition_key' AND h.event_id = o.payload->>'uuid')
			  AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.user_id = o.payload->'metadata'->>'partition_key' AND d.event_id = o.payload->>'uuid')
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

// Prune deletes outbox rows of a shard that the forwarder has passed and whose event
// the projector has applied (or dead-lettered). It returns how many rows it deleted.
func (m *OutboxMaintenance) Prune(ctx context.Context, shard int, limit int) (int64, error) {
	topic := m.schema.Topic(shard)
	msgs, offs := m.schema.Messages.MessagesTable(topic), m.schema.Offsets.MessagesOffsetsTable(topic)
	tag, err := m.pool.Exec(ctx, `
		DELETE FROM `+msgs+` o USING (
			SELECT o2.transaction_id, o2."offset" FROM `+msgs+` o2, `+offs+` f
			WHERE f.consumer_group = $1
			  AND (o2.transaction_id, o2."offset") <= (f.last_processed_transaction_id, f.offset_acked)
			  AND (EXISTS (SELECT 1 FROM score_history h WHERE h.user_id = o2.payload->'metadata'->>'partition_key' AND h.event_id = o2.payload->>'uuid')
			    OR EXISTS (SELECT 1 FROM dead_letters d WHERE d.user_id = o2.payload->'metadata'->>'partition_key' AND d.event_id = o2.payload->>'uuid'))
			ORDER BY o2.transaction_id, o2."offset" LIMIT $2
		) d
		WHERE o.transaction_id = d.transaction_id AND o."offset" = d."offset"`, RelayConsumerGroup, limit)
	if err != nil {
		return 0, unavailable(fmt.Sprintf("prune outbox shard %d", shard), err)
	}
	return tag.RowsAffected(), nil
}

// Backlog returns how many outbox rows of a shard the forwarder has not passed yet.
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
