package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Command is one command to make durable: the message to relay and its idempotency key,
// a user's event id with the hash of the body it came with.
type Command struct {
	EventID  string
	UserID   string
	Board    string
	BodyHash []byte
	Msg      *message.Message
}

// Outbox makes accepted commands durable with group commit: concurrent Accept calls of
// a shard are gathered into one transaction that records their event ids in the request
// log and inserts their messages into the shard's outbox table through the watermill-sql
// publisher.
type Outbox struct {
	db      *sql.DB
	schema  OutboxSchema
	shards  []*Batcher[Command, AcceptOutcome]
	logger  *slog.Logger
	observe func(batch int, took time.Duration)
}

// OutboxConfig configures an Outbox.
type OutboxConfig struct {
	Shards int
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
	o := &Outbox{db: db, schema: schema, logger: logger, observe: cfg.Observe}
	for shard := range cfg.Shards {
		o.shards = append(o.shards, NewBatcher(1, cfg.MaxBatch, func(cmds []Command) []Result[AcceptOutcome] {
			return o.commitBatch(shard, cmds)
		}))
	}
	return o
}

// Accept returns once the command is committed (Accepted), or found to be a retry
// (Duplicate) or a reused event id (Conflict).
func (o *Outbox) Accept(ctx context.Context, cmd Command) (AcceptOutcome, error) {
	out, err := o.shards[ShardOf(cmd.UserID, len(o.shards))].Do(ctx, cmd)
	if errors.Is(err, ErrBatcherClosed) {
		return 0, fmt.Errorf("outbox: %w: shutting down", ErrUnavailable)
	}
	return out, err
}

// Queued returns how many commands wait for their shard's transaction.
func (o *Outbox) Queued() int {
	n := 0
	for _, b := range o.shards {
		n += b.Queued()
	}
	return n
}

// Close stops accepting, commits what is queued and waits for the shards to finish.
func (o *Outbox) Close() {
	for _, b := range o.shards {
		b.Close()
	}
}

func (o *Outbox) commitBatch(shard int, cmds []Command) []Result[AcceptOutcome] {
	start := time.Now()
	outcomes, err := o.commit(shard, cmds)
	if err != nil {
		o.logger.Error("outbox commit failed", "shard", shard, "batch", len(cmds), "err", err)
	} else if o.observe != nil {
		o.observe(len(cmds), time.Since(start))
	}
	results := make([]Result[AcceptOutcome], len(cmds))
	for i := range cmds {
		if err != nil {
			results[i].Err = err
		} else {
			results[i].Value = outcomes[i]
		}
	}
	return results
}

// AcceptWith makes one command durable in a transaction of its own, after with(tx) did
// more work in it (an admin action and its audit record): both commit, or neither. with
// runs only when the command is new (Accepted); a retry (Duplicate) or Conflict changes
// nothing.
func (o *Outbox) AcceptWith(ctx context.Context, cmd Command, with func(ctx context.Context, tx *sql.Tx) error) (AcceptOutcome, error) {
	var outcome AcceptOutcome
	err := o.inTx(ctx, func(tx *sql.Tx) error {
		outcomes, err := o.record(ctx, tx, ShardOf(cmd.UserID, len(o.shards)), []Command{cmd})
		if err != nil {
			return err
		}
		outcome = outcomes[0]
		if outcome != Accepted {
			return nil
		}
		return with(ctx, tx)
	})
	return outcome, err
}

// inTx runs fn in a transaction, committing when it returns nil.
func (o *Outbox) inTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return unavailable("outbox: begin", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	if err = tx.Commit(); err != nil {
		return unavailable("outbox: commit", err)
	}
	return nil
}

// commit is one transaction: the batch's requests are recorded, the first command of
// each new (user, event id) is published to the outbox, and every other command is
// answered from the request log.
func (o *Outbox) commit(shard int, cmds []Command) (outcomes []AcceptOutcome, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = o.inTx(ctx, func(tx *sql.Tx) error {
		outcomes, err = o.record(ctx, tx, shard, cmds)
		return err
	})
	return outcomes, err
}

// record records the commands' requests in tx and publishes the new ones to the shard's
// outbox table.
func (o *Outbox) record(ctx context.Context, tx *sql.Tx, shard int, cmds []Command) ([]AcceptOutcome, error) {
	outcomes, err := recordRequests(ctx, tx, cmds)
	if err != nil {
		return nil, err
	}
	var msgs []*message.Message
	for i, c := range cmds {
		if outcomes[i] == Accepted {
			// The relay partitions by it, and its rewind and prune match (user, event id).
			c.Msg.Metadata.Set(metaPartitionKey, c.UserID)
			msgs = append(msgs, c.Msg)
		}
	}
	if len(msgs) > 0 {
		// Plain messages (no forwarder envelope): the relay knows their topic.
		pub, err := wsql.NewPublisher(tx, wsql.PublisherConfig{SchemaAdapter: o.schema.Messages}, watermill.NopLogger{})
		if err != nil {
			return nil, fmt.Errorf("outbox: publisher: %w", err)
		}
		if err := pub.Publish(o.schema.Topic(shard), msgs...); err != nil {
			return nil, unavailable("outbox: insert", err)
		}
		if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, OutboxChannel, strconv.Itoa(shard)); err != nil {
			return nil, unavailable("outbox: notify", err)
		}
	}
	return outcomes, nil
}
