package storage

import (
	"fmt"
	"hash/fnv"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
)

// OutboxSchema names the outbox tables: one watermill-sql topic per shard, each relayed
// to Kafka by its own forwarder.
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

// InitQueries creates the message and offset tables of a shard.
func (s OutboxSchema) InitQueries(shard int) []string {
	var qs []string
	for _, q := range s.Messages.SchemaInitializingQueries(s.Topic(shard)) {
		qs = append(qs, q.Query)
	}
	for _, q := range s.Offsets.SchemaInitializingQueries(s.Topic(shard)) {
		qs = append(qs, q.Query)
	}
	return qs
}

// ShardOf maps a user to its outbox shard, so one user's commands keep their order.
func ShardOf(userID string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(userID))
	return int(h.Sum32() % uint32(shards))
}
