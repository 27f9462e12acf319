package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// DeadLetter is one stored poisoned message.
type DeadLetter struct {
	ID         int64
	UUID       string
	EventID    string
	Topic      string
	Handler    string
	Subscriber string
	Reason     string
	Attempts   int
	PoisonedAt time.Time
	Payload    []byte
	Metadata   map[string]string
}

// DeadLetterFilter selects dead letters for a bulk requeue.
type DeadLetterFilter struct {
	Topic          string
	ReasonContains string
	Limit          int
}

// DeadLetterAdmin inspects, requeues and deletes dead letters. Every change is one
// transaction that also writes the admin audit trail.
type DeadLetterAdmin struct {
	db     *sql.DB
	schema OutboxSchema
	shards int
}

// NewDeadLetterAdmin returns the admin view of the dead letters; requeued messages go
// through the outbox shards, like accepted commands.
func NewDeadLetterAdmin(db *sql.DB, schema OutboxSchema, shards int) *DeadLetterAdmin {
	return &DeadLetterAdmin{db: db, schema: schema, shards: shards}
}

const deadLetterColumns = `id, uuid, coalesce(event_id, ''), topic, handler, subscriber, reason, attempts, poisoned_at, payload, metadata`

func scanDeadLetter(row interface{ Scan(...any) error }) (DeadLetter, error) {
	var l DeadLetter
	var meta []byte
	if err := row.Scan(&l.ID, &l.UUID, &l.EventID, &l.Topic, &l.Handler, &l.Subscriber, &l.Reason, &l.Attempts, &l.PoisonedAt, &l.Payload, &meta); err != nil {
		return DeadLetter{}, err
	}
	if err := json.Unmarshal(meta, &l.Metadata); err != nil {
		return DeadLetter{}, fmt.Errorf("dead letter %d metadata: %w", l.ID, err)
	}
	return l, nil
}

// List returns up to limit dead letters older than the cursor id (0: from the newest),
// newest first, and the cursor of the next page (0 when there is none).
func (a *DeadLetterAdmin) List(ctx context.Context, limit int, before int64) ([]DeadLetter, int64, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := a.db.QueryContext(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters WHERE id < $1 ORDER BY id DESC LIMIT $2`, before, limit+1)
	if err != nil {
		return nil, 0, unavailable("list dead letters", err)
	}
	defer rows.Close()
	var out []DeadLetter
	for rows.Next() {
		l, err := scanDeadLetter(rows)
		if err != nil {
			return nil, 0, unavailable("list dead letters", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, unavailable("list dead letters", err)
	}
	var next int64
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	return out, next, nil
}

// Get returns one dead letter, or ErrNotFound.
func (a *DeadLetterAdmin) Get(ctx context.Context, id int64) (DeadLetter, error) {
	l, err := scanDeadLetter(a.db.QueryRowContext(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return DeadLetter{}, ErrNotFound
	}
	return l, unavailable("get dead letter", err)
}

// Delete drops a dead letter, or returns ErrNotFound. The outbox rows of its message go
// with it, in the same transaction: a row left behind would be neither applied nor
// dead-lettered, which the relay's Rewind takes for a command a broker lost, and would
// forward again at every relay start. Those are the accepted command's rows and the
// envelopes of requeues made before it was dead-lettered (fewer attempts than it, and
// written before it); a requeue of a duplicate dead letter of the same message, as recent
// as this one or more, stays on its way, and so does a newer command that reuses the
// event id. A message is found by its event id or its uuid.
func (a *DeadLetterAdmin) Delete(ctx context.Context, id int64, actor string) error {
	return a.inTx(ctx, func(tx *sql.Tx) error {
		var user, event sql.NullString
		var uuid, topic, reason, letterTx string
		var attempts int
		err := tx.QueryRowContext(ctx, `DELETE FROM dead_letters WHERE id = $1 RETURNING user_id, event_id, uuid, attempts, topic, reason, tx::text`, id).
			Scan(&user, &event, &uuid, &attempts, &topic, &reason, &letterTx)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		var ids []string // a command's message uuid is its event id; another message's row has its uuid
		if uuid != "" {  // none: nothing tells its rows from other such messages' (a requeue gives one)
			ids = append(ids, uuid)
		}
		if event.Valid && event.String != "" {
			ids = append(ids, event.String)
		}
		for shard := range a.shards {
			o := a.schema.Messages.MessagesTable(a.schema.Topic(shard))
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+o+` o
				WHERE `+rowUser("o")+` IS NOT DISTINCT FROM $1 AND `+rowEvent("o")+` = ANY($2) AND `+rowAttempts("o")+` < $3
				  AND o.transaction_id < $4::xid8`,
				user, ids, attempts, letterTx); err != nil {
				return err
			}
		}
		// The dead letter is gone: the audit says what it was.
		return audit(ctx, tx, actor, "dlq.delete", []int64{id}, map[string]any{"letters": []map[string]any{
			letterDetail(id, uuid, event.String, user.String, topic, reason, attempts)}})
	})
}

// Requeue puts one dead letter back on its original topic through the outbox and deletes
// it, in one transaction: a crash leaves either the dead letter or the outbox row, never
// both and never neither. It returns ErrNotFound for an unknown id.
func (a *DeadLetterAdmin) Requeue(ctx context.Context, id int64, actor string) error {
	return a.inTx(ctx, func(tx *sql.Tx) error {
		l, err := scanDeadLetter(tx.QueryRowContext(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters WHERE id = $1 FOR UPDATE`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := a.requeue(ctx, tx, []DeadLetter{l}); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "dlq.requeue", []int64{id}, map[string]any{"letters": lettersDetail([]DeadLetter{l})})
	})
}

// RequeueMatching requeues the dead letters the filter selects (oldest first), in one
// transaction, and returns their ids.
func (a *DeadLetterAdmin) RequeueMatching(ctx context.Context, f DeadLetterFilter, actor string) ([]int64, error) {
	var ids []int64
	err := a.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+deadLetterColumns+` FROM dead_letters
			WHERE ($1 = '' OR topic = $1) AND ($2 = '' OR strpos(reason, $2) > 0)
			ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED`, f.Topic, f.ReasonContains, f.Limit)
		if err != nil {
			return err
		}
		var letters []DeadLetter
		for rows.Next() {
			l, err := scanDeadLetter(rows)
			if err != nil {
				rows.Close()
				return err
			}
			letters = append(letters, l)
			ids = append(ids, l.ID)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(letters) == 0 {
			return err
		}
		if err := a.requeue(ctx, tx, letters); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "dlq.requeue_matching", ids, map[string]any{"topic": f.Topic, "reason_contains": f.ReasonContains, "letters": lettersDetail(letters)})
	})
	return ids, err
}

// poisonKeys are the metadata the poison queue added; a requeued message goes without them.
var poisonKeys = map[string]bool{
	middleware.ReasonForPoisonedKey: true, middleware.PoisonedTopicKey: true,
	middleware.PoisonedHandlerKey: true, middleware.PoisonedSubscriberKey: true,
}

// requeue inserts the letters into the outbox (to their original topics) and deletes them.
func (a *DeadLetterAdmin) requeue(ctx context.Context, tx *sql.Tx, letters []DeadLetter) error {
	pub, err := wsql.NewPublisher(tx, wsql.PublisherConfig{SchemaAdapter: a.schema.Messages}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	ids := make([]int64, len(letters))
	for i, l := range letters {
		uuid := l.UUID
		if uuid == "" { // another producer's message without one: its requeue must be told apart
			uuid = watermill.NewUUID()
		}
		msg := message.NewMessage(uuid, l.Payload)
		for k, v := range l.Metadata {
			if !poisonKeys[k] {
				msg.Metadata.Set(k, v)
			}
		}
		// Within what DeadLetters.Publish reads back (at most two below the cap), so that the
		// message dead-lettered again has more attempts than this envelope says.
		msg.Metadata.Set(MetaAttempts, strconv.Itoa(min(max(l.Attempts, 0), maxAttempts-2)))
		key := msg.Metadata.Get(metaPartitionKey)
		if key == "" {
			key = uuid
		}
		shard := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: a.schema.Topic(ShardOf(key, a.shards))})
		if err := shard.Publish(l.Topic, msg); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, OutboxChannel, strconv.Itoa(ShardOf(key, a.shards))); err != nil {
			return err
		}
		ids[i] = l.ID
	}
	// Their history stays while they are on their way (Retention): the letter that kept
	// it goes now.
	if _, err := tx.ExecContext(ctx, `INSERT INTO requeued_events (user_id, event_id)
		SELECT DISTINCT user_id, event_id FROM dead_letters WHERE id = ANY($1) AND user_id IS NOT NULL AND event_id IS NOT NULL AND event_id <> ''
		ON CONFLICT (user_id, event_id) DO UPDATE SET requeued_at = now()`, ids); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `DELETE FROM dead_letters WHERE id = ANY($1)`, ids)
	return err
}

func (a *DeadLetterAdmin) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return unavailable("begin", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		if errors.Is(err, ErrNotFound) {
			return err
		}
		return unavailable("dead letter admin", err)
	}
	return unavailable("commit", tx.Commit())
}

// letterDetail is what an audit record says of a dead letter it deleted or requeued: the
// dead letter's id means nothing once it is gone.
func letterDetail(id int64, uuid, eventID, userID, topic, reason string, attempts int) map[string]any {
	return map[string]any{"id": id, "uuid": uuid, "event_id": eventID, "user_id": userID, "topic": topic, "reason": reason, "attempts": attempts}
}

func lettersDetail(letters []DeadLetter) []map[string]any {
	out := make([]map[string]any, len(letters))
	for i, l := range letters {
		out[i] = letterDetail(l.ID, l.UUID, l.EventID, l.Metadata[metaPartitionKey], l.Topic, l.Reason, l.Attempts)
	}
	return out
}

func audit(ctx context.Context, tx *sql.Tx, actor, action string, ids []int64, detail map[string]any) error {
	args, err := AuditEntry{Actor: actor, Action: action, Target: "dead_letters", IDs: ids, Detail: detail}.args()
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, insertAudit, args...)
	return err
}
