package storage

import (
	"fmt"
	"hash/fnv"
	"strings"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
)

// OutboxSchema names the outbox tables: one watermill-sql topic per shard, each relayed
// to Kafka by the relay. A row is a Watermill message (uuid = event id, JSON payload,
// metadata); requeued dead letters are Watermill forwarder envelopes naming their topic.
type OutboxSchema struct {
	Messages wsql.DefaultPostgreSQLSchema
	Offsets  wsql.DefaultPostgreSQLOffsetsAdapter
}

// NewOutboxSchema returns the schema adapters of the outbox (JSON payloads, batches of 500).
func NewOutboxSchema() OutboxSchema {
	return OutboxSchema{Messages: wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: 500}}
}

// Topic is the watermill-sql topic (table suffix) of an outbox shard.
func (OutboxSchema) Topic(shard int) string { return fmt.Sprintf("score_commands_%d", shard) }

// InitQueries creates the message and offset tables of a shard. A row's uuid is the
// command's event id (up to 64 characters), wider than watermill-sql's VARCHAR(36).
func (s OutboxSchema) InitQueries(shard int) []string {
	var qs []string
	for _, q := range s.Messages.SchemaInitializingQueries(s.Topic(shard)) {
		qs = append(qs, q.Query)
	}
	for _, q := range s.Offsets.SchemaInitializingQueries(s.Topic(shard)) {
		qs = append(qs, q.Query)
	}
	// uuid holds any event id (up to 64 characters; watermill-sql makes it VARCHAR(36)).
	// Altered only while it is not TEXT: an ALTER TABLE locks the table exclusively, and
	// every process runs these at its start.
	table := s.Messages.MessagesTable(s.Topic(shard))
	qs = append(qs, `DO $$ BEGIN
		IF (SELECT atttypid FROM pg_attribute WHERE attrelid = '`+strings.ReplaceAll(table, `'`, `''`)+`'::regclass AND attname = 'uuid') <> 'text'::regtype THEN
			ALTER TABLE `+table+` ALTER COLUMN uuid TYPE TEXT;
		END IF;
	END $$`)
	return qs
}

// OutboxChannel is the PostgreSQL notification channel an outbox commit signals (its
// payload: the shard), so an idle relay wakes at once instead of polling.
const OutboxChannel = "leaderboard_outbox"

// ShardOf maps a user to its outbox shard, so one user's commands keep their order.
func ShardOf(userID string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(userID))
	return int(h.Sum32() % uint32(shards))
}
