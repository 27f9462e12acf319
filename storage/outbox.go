package storage

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
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

// AcceptOutcome says what became of a command handed to the outbox.
type AcceptOutcome int

const (
	// Accepted: the command is durable in PostgreSQL and will be applied.
	Accepted AcceptOutcome = iota + 1
	// Duplicate: the same event_id with the same body was accepted before.
	Duplicate
	// Conflict: the event_id was accepted before with a different body.
	Conflict
)

// Command is one command to make durable: the message to relay and its idempotency key.
type Command struct {
	EventID  string
	UserID   string
	Board    string
	BodyHash []byte
	Msg      *message.Message
}

type pendingCommand struct {
	cmd   Command
	reply chan acceptReply
}

type acceptReply struct {
	outcome AcceptOutcome
	err     error
}

// Outbox makes accepted commands durable with group commit: concurrent Accept calls of
// a shard are gathered into one transaction that records their event ids and inserts
// their messages into the shard's outbox table through the watermill-sql publisher.
type Outbox struct {
	db        *sql.DB
	schema    OutboxSchema
	destTopic string
	maxBatch  int
	queues    []chan pendingCommand
	logger    *slog.Logger
	observe   func(batch int, took time.Duration)

	mu     sync.RWMutex
	closed bool
	wg     sync.WaitGroup
}

// OutboxConfig configures an Outbox.
type OutboxConfig struct {
	Shards int
	// DestinationTopic is the Kafka topic the relay forwards the commands to.
	DestinationTopic string
	// MaxBatch bounds the commands in one transaction (default 256).
	MaxBatch int
	// Observe, when set, is called after each committed batch.
	Observe func(batch int, took time.Duration)
}

// NewOutbox starts one committing goroutine per shard. Close stops them.
func NewOutbox(db *sql.DB, schema OutboxSchema, cfg OutboxConfig, logger *slog.Logger) *Outbox {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 256
	}
	o := &Outbox{db: db, schema: schema, destTopic: cfg.DestinationTopic, maxBatch: cfg.MaxBatch, logger: logger, observe: cfg.Observe}
	for shard := 0; shard < cfg.Shards; shard++ {
		q := make(chan pendingCommand, cfg.MaxBatch*4)
		o.queues = append(o.queues, q)
		o.wg.Add(1)
		go o.run(shard, q)
	}
	return o
}

// Accept returns once the command is committed (Accepted), or found to be a retry
// (Duplicate) or a reused event id (Conflict).
func (o *Outbox) Accept(ctx context.Context, cmd Command) (AcceptOutcome, error) {
	p := pendingCommand{cmd: cmd, reply: make(chan acceptReply, 1)}
	o.mu.RLock()
	if o.closed {
		o.mu.RUnlock()
		return 0, fmt.Errorf("outbox: %w: shutting down", ErrUnavailable)
	}
	select {
	case o.queues[ShardOf(cmd.UserID, len(o.queues))] <- p:
		o.mu.RUnlock()
	case <-ctx.Done():
		o.mu.RUnlock()
		return 0, ctx.Err()
	}
	select {
	case r := <-p.reply:
		return r.outcome, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Close stops accepting, commits what is queued and waits for the shards to finish.
func (o *Outbox) Close() {
	o.mu.Lock()
	if !o.closed {
		o.closed = true
		for _, q := range o.queues {
			close(q)
		}
	}
	o.mu.Unlock()
	o.wg.Wait()
}

func (o *Outbox) run(shard int, q chan pendingCommand) {
	defer o.wg.Done()
	batch := make([]pendingCommand, 0, o.maxBatch)
	for first := range q {
		batch = append(batch[:0], first)
	drain:
		for len(batch) < o.maxBatch {
			select {
			case p, ok := <-q:
				if !ok {
					break drain
				}
				batch = append(batch, p)
			default:
				break drain
			}
		}
		start := time.Now()
		outcomes, err := o.commit(shard, batch)
		if err != nil {
			o.logger.Error("outbox commit failed", "shard", shard, "batch", len(batch), "err", err)
		} else if o.observe != nil {
			o.observe(len(batch), time.Since(start))
		}
		for i, p := range batch {
			if err != nil {
				p.reply <- acceptReply{err: err}
				continue
			}
			p.reply <- acceptReply{outcome: outcomes[i]}
		}
	}
}

func (o *Outbox) commit(shard int, batch []pendingCommand) (outcomes []AcceptOutcome, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, unavailable("outbox: begin", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()

	ids := make([]string, len(batch))
	hashes := make([][]byte, len(batch))
	users := make([]string, len(batch))
	boards := make([]string, len(batch))
	for i, p := range batch {
		ids[i], hashes[i], users[i], boards[i] = p.cmd.EventID, p.cmd.BodyHash, p.cmd.UserID, p.cmd.Board
	}
	rows, err := tx.QueryContext(ctx, `
		INSERT INTO score_requests (event_id, body_hash, user_id, board_id)
		SELECT * FROM unnest($1::text[], $2::bytea[], $3::text[], $4::text[])
		ON CONFLICT (user_id, event_id) DO NOTHING
		RETURNING user_id, event_id`, ids, hashes, users, boards)
	if err != nil {
		return nil, unavailable("outbox: record requests", err)
	}
	inserted := map[requestKey]bool{}
	for rows.Next() {
		var k requestKey
		if err := rows.Scan(&k.user, &k.event); err != nil {
			rows.Close()
			return nil, unavailable("outbox: scan", err)
		}
		inserted[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("outbox: record requests", err)
	}

	outcomes = make([]AcceptOutcome, len(batch))
	var msgs []*message.Message
	var known []requestKey
	firstHash := map[requestKey][]byte{}
	for i, p := range batch {
		k := requestKey{p.cmd.UserID, p.cmd.EventID}
		if inserted[k] {
			if _, seen := firstHash[k]; !seen { // the first of this event id in the batch wins
				firstHash[k] = p.cmd.BodyHash
				outcomes[i] = Accepted
				// The relay partitions by it, and its rewind and prune match (user, event id).
				p.cmd.Msg.Metadata.Set(metaPartitionKey, p.cmd.UserID)
				msgs = append(msgs, p.cmd.Msg)
				continue
			}
		}
		known = append(known, k)
	}
	if len(known) > 0 {
		stored, err := storedHashes(ctx, tx, known)
		if err != nil {
			return nil, err
		}
		for k, v := range firstHash {
			stored[k] = v
		}
		for i, p := range batch {
			if outcomes[i] != 0 {
				continue
			}
			if bytes.Equal(stored[requestKey{p.cmd.UserID, p.cmd.EventID}], p.cmd.BodyHash) {
				outcomes[i] = Duplicate
			} else {
				outcomes[i] = Conflict
			}
		}
	}

	if len(msgs) > 0 {
		pub, err := wsql.NewPublisher(tx, wsql.PublisherConfig{SchemaAdapter: o.schema.Messages}, watermill.NopLogger{})
		if err != nil {
			return nil, fmt.Errorf("outbox: publisher: %w", err)
		}
		fwd := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: o.schema.Topic(shard)})
		if err := fwd.Publish(o.destTopic, msgs...); err != nil {
			return nil, unavailable("outbox: insert", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, unavailable("outbox: commit", err)
	}
	return outcomes, nil
}

// metaPartitionKey is the metadata key of the Kafka partition key (messages.MetaPartitionKey):
// the user id of a command.
const metaPartitionKey = "partition_key"

// requestKey identifies an accepted command: event ids are scoped by user.
type requestKey struct{ user, event string }

func storedHashes(ctx context.Context, tx *sql.Tx, keys []requestKey) (map[requestKey][]byte, error) {
	users, events := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		users[i], events[i] = k.user, k.event
	}
	rows, err := tx.QueryContext(ctx, `
		SELECT r.user_id, r.event_id, r.body_hash FROM score_requests r
		JOIN unnest($1::text[], $2::text[]) AS k(u, e) ON r.user_id = k.u AND r.event_id = k.e`, users, events)
	if err != nil {
		return nil, unavailable("outbox: look up requests", err)
	}
	defer rows.Close()
	out := map[requestKey][]byte{}
	for rows.Next() {
		var k requestKey
		var h []byte
		if err := rows.Scan(&k.user, &k.event, &h); err != nil {
			return nil, unavailable("outbox: scan request", err)
		}
		out[k] = h
	}
	return out, unavailable("outbox: look up requests", rows.Err())
}

// LookupRequest returns the body hash recorded for a user's accepted event id, or
// ErrNotFound.
func LookupRequest(ctx context.Context, db DBTX, userID, eventID string) ([]byte, error) {
	var h []byte
	err := db.QueryRowContext(ctx, `SELECT body_hash FROM score_requests WHERE user_id = $1 AND event_id = $2`, userID, eventID).Scan(&h)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	return h, unavailable("look up request", err)
}

// DBTX is what LookupRequest needs of a database/sql handle.
type DBTX interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}
