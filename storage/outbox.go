package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
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

// Outbox makes accepted commands durable with group commit: concurrent Accept calls are
// gathered into one transaction that records their event ids in the request log and
// inserts their messages into their shards' outbox tables (a user's shard is fixed, so its
// commands keep their order) with watermill-sql's insert statements.
type Outbox struct {
	db      *sql.DB
	schema  OutboxSchema
	shards  int
	batcher *Batcher[Command, AcceptOutcome]
	logger  *slog.Logger
	observe func(batch int, took time.Duration)
}

// OutboxConfig configures an Outbox.
type OutboxConfig struct {
	Shards int
	// MaxBatch bounds the commands in one transaction (default 256).
	MaxBatch int
	// Linger is how long a transaction waits after its first command for more (0: it
	// takes what gathered while the last one committed).
	Linger time.Duration
	// Observe, when set, is called after each committed batch.
	Observe func(batch int, took time.Duration)
}

// outboxCommitters is how many transactions an Outbox has open at once. One: while it
// commits, the next batch gathers (the fewer transactions, the fewer fsyncs and round
// trips per command), and no two of its transactions wait on each other's request keys.
const outboxCommitters = 1

// NewOutbox starts the committing goroutine. Close stops it.
func NewOutbox(db *sql.DB, schema OutboxSchema, cfg OutboxConfig, logger *slog.Logger) *Outbox {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 256
	}
	o := &Outbox{db: db, schema: schema, shards: max(cfg.Shards, 1), logger: logger, observe: cfg.Observe}
	o.batcher = NewGatheringBatcher(outboxCommitters, cfg.MaxBatch, cfg.Linger, o.commitBatch)
	return o
}

// Accept returns once the command is committed (Accepted), or found to be a retry
// (Duplicate) or a reused event id (Conflict).
func (o *Outbox) Accept(ctx context.Context, cmd Command) (AcceptOutcome, error) {
	out, err := o.batcher.Do(ctx, cmd)
	if errors.Is(err, ErrBatcherClosed) {
		return 0, fmt.Errorf("outbox: %w: shutting down", ErrUnavailable)
	}
	return out, err
}

// Queued returns how many commands wait for a transaction.
func (o *Outbox) Queued() int { return o.batcher.Queued() }

// Close stops accepting, commits what is queued and waits for the committer to finish.
func (o *Outbox) Close() { o.batcher.Close() }

func (o *Outbox) commitBatch(cmds []Command) []Result[AcceptOutcome] {
	start := time.Now()
	outcomes, err := o.commit(cmds)
	if errors.Is(err, ErrRejected) && len(cmds) > 1 {
		// PostgreSQL refused something in the batch (one command's data: the API checks what
		// it can, this keeps a gap in those checks to the command that fell in it). The
		// transaction rolled back; each command goes again in one of its own, so that the
		// others gathered with it are not refused too.
		o.logger.Warn("outbox: a batch was rejected; committing its commands one by one", "batch", len(cmds), "err", err)
		results := make([]Result[AcceptOutcome], len(cmds))
		for i := range cmds {
			results[i] = o.commitBatch(cmds[i : i+1])[0]
		}
		return results
	}
	if err != nil {
		o.logger.Error("outbox commit failed", "batch", len(cmds), "err", err)
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
		outcomes, err := o.record(ctx, tx, []Command{cmd})
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

// commit is one transaction in two round trips to PostgreSQL, pipelined with pgx on a
// connection of the database/sql pool: BEGIN with the request log's insert, then the
// outbox inserts, the notification and COMMIT (a third, between them, only when the batch
// holds retries: their recorded body hashes). A round trip per statement made about seven
// a transaction, each costing the service and its PostgreSQL backend a write and a read.
func (o *Outbox) commit(cmds []Command) ([]AcceptOutcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := o.db.Conn(ctx)
	if err != nil {
		return nil, unavailable("outbox: connection", err)
	}
	defer conn.Close()
	var outcomes []AcceptOutcome
	err = conn.Raw(func(dc any) (err error) {
		c := dc.(*stdlib.Conn).Conn()
		if outcomes, err = o.commitOn(ctx, c, cmds); err != nil && c.PgConn().TxStatus() != 'I' {
			// End the failed transaction now: left open on an idle connection it would keep
			// its request keys locked and hold back every relay (no outbox row newer than an
			// open transaction is read). A connection that cannot roll back is closed, which
			// ends it too. (With stdlib.OpenDBFromPool no connection idles in database/sql,
			// and pgxpool destroys one released in a transaction; other handles keep them.)
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer rcancel()
			if _, rerr := c.Exec(rctx, "ROLLBACK"); rerr != nil {
				_ = c.Close(rctx)
			}
		}
		return err
	})
	return outcomes, err
}

func (o *Outbox) commitOn(ctx context.Context, c *pgx.Conn, cmds []Command) ([]AcceptOutcome, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(insertRequestsSQL, requestsArgs(cmds)...)
	br := c.SendBatch(ctx, b)
	inserted := map[requestKey]bool{}
	_, err := br.Exec()
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			var k requestKey
			_, err = pgx.ForEachRow(rows, []any{&k.user, &k.event}, func() error {
				inserted[k] = true
				return nil
			})
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, unavailable("outbox: record requests", err)
	}
	outcomes, err := decideOutcomes(cmds, inserted, func(keys []requestKey) (map[requestKey][]byte, error) {
		return recordedHashes(ctx, connRows(c), keys)
	})
	if err != nil {
		return nil, err
	}
	qs, err := o.publishQueries(cmds, outcomes)
	if err != nil {
		return nil, err
	}
	b = &pgx.Batch{}
	for _, q := range qs {
		b.Queue(q.Query, q.Args...)
	}
	b.Queue("COMMIT")
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		return nil, unavailable("outbox: publish and commit", err)
	}
	return outcomes, nil
}

// insertMessagesQuery inserts msgs into the watermill-sql messages table, in order, as
// watermill-sql's PostgreSQL schema adapter does (uuid, JSON payload, metadata as a JSON
// object of strings, the inserting transaction's id), but with one statement text for
// any number of messages: the adapter's VALUES list has three parameters per message, so
// every batch size was a statement of its own to prepare on every connection.
func insertMessagesQuery(table string, msgs []*message.Message) (wsql.Query, error) {
	uuids, payloads, metas := make(pgTexts, len(msgs)), make(pgTexts, len(msgs)), make(pgTexts, len(msgs))
	for i, m := range msgs {
		md, err := encodeMetadata(m.Metadata)
		if err != nil {
			return wsql.Query{}, fmt.Errorf("metadata of message %s: %w", m.UUID, err)
		}
		uuids[i], payloads[i], metas[i] = m.UUID, string(m.Payload), md
	}
	return wsql.Query{Query: `
		INSERT INTO ` + table + ` (uuid, payload, metadata, transaction_id)
		SELECT k.u, k.p::json, k.m::json, pg_current_xact_id()
		FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS k(u, p, m, n)
		ORDER BY k.n`, Args: []any{uuids, payloads, metas}}, nil
}

// encodeMetadata writes metadata as json.Marshal does (keys in order, strings escaped
// alike); metadata of plain ASCII without a character JSON escapes, all of ours, is
// written without reflection.
func encodeMetadata(md message.Metadata) (string, error) {
	if md == nil {
		return "null", nil
	}
	keys := make([]string, 0, len(md))
	size := 2
	for k, v := range md {
		if !plainJSON(k) || !plainJSON(v) {
			b, err := json.Marshal(md)
			return string(b), err
		}
		keys = append(keys, k)
		size += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(size)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(k)
		b.WriteString(`":"`)
		b.WriteString(md[k])
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String(), nil
}

// plainJSON says whether json.Marshal writes s as it is between quotes: printable ASCII
// but for '"', '\\' and the HTML characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// record records the commands' requests in tx and publishes the new ones.
func (o *Outbox) record(ctx context.Context, tx *sql.Tx, cmds []Command) ([]AcceptOutcome, error) {
	outcomes, err := recordRequests(ctx, txRows(tx), cmds)
	if err != nil {
		return nil, err
	}
	qs, err := o.publishQueries(cmds, outcomes)
	if err != nil {
		return nil, err
	}
	for _, q := range qs {
		if _, err := tx.ExecContext(ctx, q.Query, q.Args...); err != nil {
			return nil, unavailable("outbox: publish", err)
		}
	}
	return outcomes, nil
}

// publishQueries returns the statements that publish the Accepted commands to their
// shards' outbox tables: one insert per shard written (insertMessagesQuery: plain
// messages, no forwarder envelope, the relay knows their topic), then one statement
// waking the relays of every shard written on commit.
func (o *Outbox) publishQueries(cmds []Command, outcomes []AcceptOutcome) ([]wsql.Query, error) {
	byShard := make([][]*message.Message, o.shards)
	for i, c := range cmds {
		if outcomes[i] == Accepted {
			// The relay partitions by it, and its rewind and prune match (user, event id).
			c.Msg.Metadata.Set(metaPartitionKey, c.UserID)
			shard := ShardOf(c.UserID, o.shards)
			byShard[shard] = append(byShard[shard], c.Msg)
		}
	}
	var (
		qs     []wsql.Query
		notify strings.Builder
	)
	for shard, msgs := range byShard {
		if len(msgs) == 0 {
			continue
		}
		q, err := insertMessagesQuery(o.schema.Messages.MessagesTable(o.schema.Topic(shard)), msgs)
		if err != nil {
			return nil, fmt.Errorf("outbox: %w", err)
		}
		qs = append(qs, q)
		if notify.Len() == 0 {
			notify.WriteString("SELECT ")
		} else {
			notify.WriteString(", ")
		}
		fmt.Fprintf(&notify, "pg_notify($1, '%d')", shard)
	}
	if notify.Len() > 0 {
		qs = append(qs, wsql.Query{Query: notify.String(), Args: []any{OutboxChannel}})
	}
	return qs, nil
}
