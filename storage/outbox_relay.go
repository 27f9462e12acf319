package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// OutboxClaim is a relay's hold on one outbox shard. It is an alias of an interface
// literal so that the relay (router) can name the same type without importing storage.
type OutboxClaim = interface {
	// Read returns up to limit messages after the shard's position, in commit order.
	// pending says rows exist after them that cannot be read yet: a write transaction
	// older than them is still open, and reading past it could skip its rows.
	Read(ctx context.Context, limit int) (msgs []*message.Message, pending bool, err error)
	// Ack moves the shard's position past every message the last Read returned.
	Ack(ctx context.Context) error
	// Position is the shard's position when it was claimed, and Acked the one the last Ack
	// moved it to ("" before one), as "transaction id:offset" ("" for none): a relay that
	// claims its shard again finds the position it left if no other relay moved it.
	Position() string
	Acked() string
	// Rewind moves the shard's position back past commands acknowledged but not applied
	// (OutboxMaintenance.Rewind), on the claim's own session.
	Rewind(ctx context.Context) (int64, error)
	// Close releases the shard (it closes the session that holds its lock).
	Close()
}

// relayLock is the session advisory lock of a shard's relay.
const relayLock = `SELECT pg_try_advisory_lock(hashtextextended('leaderboard-relay:' || $1::text, 0))`

// Claim takes a shard's session advisory lock on a connection of its own, so one relay
// forwards the shard at a time. It returns nil without error when another relay holds it.
// A claim takes its connection out of the pool (a try that finds the lock taken gives it
// back): it holds it as long as it forwards the shard, and claims of every shard (and their
// rewinds) on a pool smaller than the shard count would leave the others waiting for a
// connection for good.
func (m *OutboxMaintenance) Claim(ctx context.Context, shard int) (OutboxClaim, error) {
	pooled, err := m.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	var locked bool
	if err := pooled.QueryRow(ctx, relayLock, strconv.Itoa(shard)).Scan(&locked); err != nil {
		pooled.Conn().Close(ctx) //nolint:errcheck // a broken connection is dropped
		pooled.Release()
		return nil, err
	}
	if !locked {
		pooled.Release()
		return nil, nil
	}
	conn := pooled.Hijack()
	drop := func() { conn.Close(context.WithoutCancel(ctx)) } //nolint:errcheck // a broken connection is dropped
	// The claim's acks need not wait for the WAL to reach the disk: an ack lost in a crash
	// only makes the relay forward those rows again, which the projector recognises by
	// their event ids (and Rewind moves the position back further anyway). Nothing else
	// runs on this session: Close ends it. Over TCP, PostgreSQL probes the session after
	// 10 s of silence and ends it when 3 probes 5 s apart go unanswered, or when what it
	// sends goes unacknowledged for 30 s: a relay cut off by the network (whose calls time
	// out, so it drops the session) gives the shard's lock up within about 30 s, not when
	// the system's keepalive (2 hours by default) or retransmissions (about 15 minutes)
	// notice.
	if _, err := conn.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', false), set_config('tcp_keepalives_idle', '10', false),
		set_config('tcp_keepalives_interval', '5', false), set_config('tcp_keepalives_count', '3', false),
		set_config('tcp_user_timeout', '30000', false)`); err != nil {
		drop()
		return nil, err
	}
	topic := m.schema.Topic(shard)
	c := &shardClaim{conn: conn, shard: shard, msgs: m.schema.Messages.MessagesTable(topic), offs: m.schema.Offsets.MessagesOffsetsTable(topic)}
	if err := conn.QueryRow(ctx, `SELECT coalesce((SELECT last_processed_transaction_id::text || ':' || offset_acked FROM `+c.offs+`
		WHERE consumer_group = $1), '')`, RelayConsumerGroup).Scan(&c.start); err != nil {
		drop()
		return nil, err
	}
	return c, nil
}

// Listen calls wake with the shard of every outbox notification until ctx ends or its
// connection fails.
func (m *OutboxMaintenance) Listen(ctx context.Context, wake func(shard int)) error {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+OutboxChannel); err != nil {
		return err
	}
	defer func() {
		// Bounded: on a connection PostgreSQL stopped answering it would wait for TCP to
		// give up (minutes), and the process's stop with it. One that fails is closed.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "UNLISTEN *"); err != nil {
			_ = conn.Conn().Close(uctx)
		}
	}()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if shard, err := strconv.Atoi(n.Payload); err == nil {
			wake(shard)
		}
	}
}

// relayReadSQL reads the rows after the position of consumer group $1 in offsets table
// offs, up to $2 of them, from messages table msgs (see Read). "After" is a row
// comparison, so that the primary key's range scan starts at the position even in the
// generic plan PostgreSQL settles on for a prepared statement: spelled as watermill-sql
// does, (tx = p.tx AND offset > p.o) OR tx > p.tx, the generic plan walked every row still
// in the table, forwarded or not, on each read (at saturation 60 µs of PostgreSQL CPU per
// event).
func relayReadSQL(msgs, offs string) string {
	return `
		WITH pos AS (
			SELECT coalesce((SELECT offset_acked FROM ` + offs + ` WHERE consumer_group = $1), 0) AS o,
			       coalesce((SELECT last_processed_transaction_id FROM ` + offs + ` WHERE consumer_group = $1), '0'::xid8) AS tx
		)
		SELECT m."offset", m.transaction_id::text, m.uuid, m.payload::text, coalesce(m.metadata::text, '{}'),
		       m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
		FROM ` + msgs + ` m, pos
		WHERE (m.transaction_id, m."offset") > (pos.tx, pos.o)
		ORDER BY m.transaction_id, m."offset" LIMIT $2`
}

// shardClaim reads and acknowledges one shard on the connection holding its lock.
type shardClaim struct {
	conn       *pgx.Conn
	shard      int
	msgs, offs string
	// last is the position of the last row Read returned (offset and transaction id).
	last struct {
		offset int64
		txID   string
	}
	unacked bool
	// start is the position when claimed, acked the last one Ack moved it to.
	start, acked string
}

func (c *shardClaim) Position() string { return c.start }
func (c *shardClaim) Acked() string    { return c.acked }

// Read reads the position, the rows after it and whether each may be read in one
// statement. A row may be read once no transaction older than its own is open
// (watermill-sql's rule: its rows could still commit before this one's position).
func (c *shardClaim) Read(ctx context.Context, limit int) ([]*message.Message, bool, error) {
	rows, err := c.conn.Query(ctx, relayReadSQL(c.msgs, c.offs), RelayConsumerGroup, limit)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	c.unacked = false // only what this Read returns is acknowledged by the next Ack
	var (
		out      []*message.Message
		pending  bool
		lastOff  int64
		lastTxID string
	)
	for rows.Next() {
		var (
			offset     int64
			txID, uuid string
			payload    []byte
			meta       pgtype.DriverBytes // read before the next row
			ready      bool
		)
		if err := rows.Scan(&offset, &txID, &uuid, &payload, &meta, &ready); err != nil {
			return nil, false, err
		}
		if !ready { // this row and the ones after it wait for an older transaction
			pending = true
			break
		}
		msg := message.NewMessage(uuid, payload)
		var ok bool
		if msg.Metadata, ok = decodeFlatMetadata(meta); !ok {
			if err := json.Unmarshal(meta, &msg.Metadata); err != nil {
				return nil, false, fmt.Errorf("outbox row %d: metadata: %w", offset, err)
			}
		}
		if msg.Metadata == nil {
			msg.Metadata = message.Metadata{}
		}
		msg.Metadata.Set(MetaOutboxRow, OutboxRow{Shard: c.shard, TxID: txID, Offset: offset}.String())
		out = append(out, msg)
		lastOff, lastTxID = offset, txID
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	if len(out) > 0 {
		c.last.offset, c.last.txID, c.unacked = lastOff, lastTxID, true
	}
	return out, pending, nil
}

// decodeFlatMetadata decodes metadata as json.Marshal writes a message's (an object of
// plain strings, no spaces) without reflection; ok is false for anything else (an escape,
// a byte outside ASCII, another shape), which json.Unmarshal then decodes.
func decodeFlatMetadata(b []byte) (md message.Metadata, ok bool) {
	if len(b) < 2 || b[0] != '{' {
		return nil, false
	}
	md = message.Metadata{}
	i := 1
	end := func() (message.Metadata, bool) { // at the closing brace: the end of b
		if i+1 != len(b) {
			return nil, false
		}
		return md, true
	}
	if b[i] == '}' {
		return end()
	}
	str := func() (string, bool) {
		if i >= len(b) || b[i] != '"' {
			return "", false
		}
		start := i + 1
		for j := start; j < len(b); j++ {
			switch c := b[j]; {
			case c == '"':
				i = j + 1
				return string(b[start:j]), true
			case c == '\\' || c < 0x20 || c >= 0x80:
				return "", false
			}
		}
		return "", false
	}
	for {
		k, ok := str()
		if !ok || i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i++
		v, ok := str()
		if !ok || i >= len(b) {
			return nil, false
		}
		md[k] = v
		switch b[i] {
		case ',':
			i++
		case '}':
			return end()
		default:
			return nil, false
		}
	}
}

// Ack stores the position of the last row read in the shard's offsets table (the row
// of RelayConsumerGroup, in watermill-sql's format).
func (c *shardClaim) Ack(ctx context.Context) error {
	if !c.unacked {
		return nil
	}
	if _, err := c.conn.Exec(ctx, `
		INSERT INTO `+c.offs+` (consumer_group, offset_acked, last_processed_transaction_id) VALUES ($1, $2, $3::xid8)
		ON CONFLICT (consumer_group) DO UPDATE SET offset_acked = excluded.offset_acked,
			last_processed_transaction_id = excluded.last_processed_transaction_id`,
		RelayConsumerGroup, c.last.offset, c.last.txID); err != nil {
		return err
	}
	c.unacked = false
	c.acked = c.last.txID + ":" + strconv.FormatInt(c.last.offset, 10)
	return nil
}

// Close ends the session, which releases the shard's lock.
func (c *shardClaim) Close() {
	_ = c.conn.Close(context.Background())
}

// Rewind is OutboxMaintenance.Rewind of the claimed shard, on the claim's session.
func (c *shardClaim) Rewind(ctx context.Context) (int64, error) {
	return rewind(ctx, c.conn, c.shard, c.msgs, c.offs)
}

// MetaOutboxRow is the metadata key (messages.MetaOutboxRow) under which Read names the
// row a message comes from.
const MetaOutboxRow = "outbox_row"

// OutboxRow names one outbox row: its shard and primary key.
type OutboxRow struct {
	Shard  int
	TxID   string // the row's transaction_id (xid8) in decimal
	Offset int64
}

// String is the row as metadata carries it: "shard:transaction id:offset".
func (r OutboxRow) String() string {
	return strconv.Itoa(r.Shard) + ":" + r.TxID + ":" + strconv.FormatInt(r.Offset, 10)
}

// ParseOutboxRow reads a row named by String; ok is false for anything else.
func ParseOutboxRow(s string) (r OutboxRow, ok bool) {
	shard, rest, ok1 := strings.Cut(s, ":")
	tx, offset, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return OutboxRow{}, false
	}
	var err error
	if r.Shard, err = strconv.Atoi(shard); err != nil || r.Shard < 0 {
		return OutboxRow{}, false
	}
	if _, err := strconv.ParseUint(tx, 10, 64); err != nil {
		return OutboxRow{}, false
	}
	if r.Offset, err = strconv.ParseInt(offset, 10, 64); err != nil {
		return OutboxRow{}, false
	}
	r.TxID = tx
	return r, true
}
