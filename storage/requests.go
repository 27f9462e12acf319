package storage

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AcceptOutcome says what became of a command: the request log decides it, once, from the
// user's event id and the hash of the body it came with.
type AcceptOutcome int

const (
	// Accepted: the command is durable in PostgreSQL and will be applied.
	Accepted AcceptOutcome = iota + 1
	// Duplicate: the same event id with the same body was accepted before.
	Duplicate
	// Conflict: the event id was accepted before with a different body.
	Conflict
)

// String names the outcome (for logs and metrics).
func (o AcceptOutcome) String() string {
	switch o {
	case Accepted:
		return "accepted"
	case Duplicate:
		return "duplicate"
	case Conflict:
		return "conflict"
	}
	return "unknown"
}

// metaPartitionKey is the metadata key of the Kafka partition key (messages.MetaPartitionKey):
// the user id of a command.
const metaPartitionKey = "partition_key"

// requestKey identifies an accepted command: event ids are scoped by user.
type requestKey struct{ user, event string }

// seenBefore is the idempotency rule: a request seen before is a Duplicate when its body
// hash is the one recorded, a Conflict otherwise.
func seenBefore(recorded, hash []byte) AcceptOutcome {
	if bytes.Equal(recorded, hash) {
		return Duplicate
	}
	return Conflict
}

// recordRequests records the commands' (user, event id) in score_requests with q (within
// the transaction it runs in). The first command of each new key is Accepted; every other
// one is answered by seenBefore from what is recorded (by this batch or earlier).
func recordRequests(ctx context.Context, q queryRows, cmds []Command) ([]AcceptOutcome, error) {
	inserted := map[requestKey]bool{}
	var k requestKey
	if err := q(ctx, insertRequestsSQL, requestsArgs(cmds), []any{&k.user, &k.event}, func() { inserted[k] = true }); err != nil {
		return nil, unavailable("outbox: record requests", err)
	}
	return decideOutcomes(cmds, inserted, func(keys []requestKey) (map[requestKey][]byte, error) {
		return recordedHashes(ctx, q, keys)
	})
}

// queryRows runs a query and calls each after scanning every row into dest: what the
// request log reads with, in a *sql.Tx (txRows) or on a pgx connection (connRows).
type queryRows func(ctx context.Context, sql string, args, dest []any, each func()) error

func txRows(tx *sql.Tx) queryRows {
	return func(ctx context.Context, query string, args, dest []any, each func()) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			each()
		}
		return rows.Err()
	}
}

func connRows(c *pgx.Conn) queryRows {
	return func(ctx context.Context, query string, args, dest []any, each func()) error {
		rows, _ := c.Query(ctx, query, args...) // its error comes back from ForEachRow
		_, err := pgx.ForEachRow(rows, dest, func() error { each(); return nil })
		return err
	}
}

// recordedHashes returns the body hashes recorded for keys.
func recordedHashes(ctx context.Context, q queryRows, keys []requestKey) (map[requestKey][]byte, error) {
	users, events := make(pgTexts, len(keys)), make(pgTexts, len(keys))
	for i, k := range keys {
		users[i], events[i] = k.user, k.event
	}
	out := map[requestKey][]byte{}
	var (
		k requestKey
		h []byte
	)
	err := q(ctx, recordedHashesSQL, []any{users, events}, []any{&k.user, &k.event, &h}, func() { out[k] = h })
	return out, unavailable("outbox: look up requests", err)
}

// insertRequestsSQL records requests (arguments: requestsArgs) and returns the keys that
// are new. The keys go in one order, whatever the batch's: two processes' group commits
// holding a retry of the same two requests in opposite orders would otherwise wait on
// each other, and PostgreSQL would fail one batch, every command in it, as a deadlock.
const insertRequestsSQL = `
		INSERT INTO score_requests (event_id, body_hash, user_id, board_id)
		SELECT * FROM unnest($1::text[], $2::bytea[], $3::text[], $4::text[]) AS k(e, h, u, b) ORDER BY k.u, k.e
		ON CONFLICT (user_id, event_id) DO NOTHING
		RETURNING user_id, event_id`

// recordedHashesSQL returns the recorded body hashes of keys (arguments: users, event ids).
const recordedHashesSQL = `
		SELECT r.user_id, r.event_id, r.body_hash FROM score_requests r
		JOIN unnest($1::text[], $2::text[]) AS k(u, e) ON r.user_id = k.u AND r.event_id = k.e`

func requestsArgs(cmds []Command) []any {
	ids, hashes, users, boards := make(pgTexts, len(cmds)), make(pgBytes, len(cmds)), make(pgTexts, len(cmds)), make(pgTexts, len(cmds))
	for i, c := range cmds {
		ids[i], hashes[i], users[i], boards[i] = c.EventID, c.BodyHash, c.UserID, c.Board
	}
	return []any{ids, hashes, users, boards}
}

// decideOutcomes answers each command from the keys its batch inserted (the first
// command of each is Accepted) and, for the others, from the body hashes lookup returns.
func decideOutcomes(cmds []Command, inserted map[requestKey]bool, lookup func([]requestKey) (map[requestKey][]byte, error)) ([]AcceptOutcome, error) {
	outcomes := make([]AcceptOutcome, len(cmds))
	recorded := map[requestKey][]byte{}
	var known []requestKey
	for i, c := range cmds {
		k := requestKey{c.UserID, c.EventID}
		if _, ok := recorded[k]; inserted[k] && !ok { // the first of this key in the batch wins
			recorded[k] = c.BodyHash
			outcomes[i] = Accepted
			continue
		}
		known = append(known, k)
	}
	if len(known) > 0 {
		stored, err := lookup(known)
		if err != nil {
			return nil, err
		}
		for k, v := range recorded {
			stored[k] = v
		}
		for i, c := range cmds {
			if outcomes[i] == 0 {
				outcomes[i] = seenBefore(stored[requestKey{c.UserID, c.EventID}], c.BodyHash)
			}
		}
	}
	return outcomes, nil
}

// RequestLog answers what the API needs to know of accepted commands outside the outbox's
// transaction: whether a request was seen before, and whether it was applied.
type RequestLog struct {
	pool *pgxpool.Pool
}

// NewRequestLog returns the request log in PostgreSQL.
func NewRequestLog(pool *pgxpool.Pool) *RequestLog { return &RequestLog{pool: pool} }

// Check tells a request seen before apart: Duplicate (same body hash) or Conflict
// (another one); ErrNotFound when the user never sent this event id.
func (r *RequestLog) Check(ctx context.Context, userID, eventID string, hash []byte) (AcceptOutcome, error) {
	var recorded []byte
	err := r.pool.QueryRow(ctx, `SELECT body_hash FROM score_requests WHERE user_id = $1 AND event_id = $2`, userID, eventID).Scan(&recorded)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, unavailable("look up request", err)
	}
	return seenBefore(recorded, hash), nil
}

// RecordUnchanged records a write answered "unchanged" (a best score that does not beat
// its entry of period) under the client's event id, unless the event id is recorded
// already: New (Accepted) when it was not, else Duplicate or Conflict by the body hash,
// with whether the recorded request was itself answered unchanged (a retry answered so
// again) or accepted, and the period it was answered for (this one when new). Its time is
// at, or PostgreSQL's when later (accepted commands are stamped by PostgreSQL's clock, which
// the retention reads too).
func (r *RequestLog) RecordUnchanged(ctx context.Context, userID, eventID, board, period string, hash []byte, at time.Time) (AcceptOutcome, bool, string, error) {
	// One row: the insert's, or (the insert's snapshot cannot see its own row) the one
	// recorded before.
	var inserted, unchanged bool
	var recorded []byte
	var recordedPeriod *string
	err := r.pool.QueryRow(ctx, `
		WITH ins AS (
			INSERT INTO score_requests (event_id, body_hash, user_id, board_id, unchanged, accepted_at, period)
			VALUES ($2, $3, $1, $4, true, greatest($5::timestamptz, now()), $6)
			ON CONFLICT (user_id, event_id) DO NOTHING
			RETURNING true)
		SELECT true, ''::bytea, true, $6::text FROM ins
		UNION ALL
		SELECT false, body_hash, unchanged, period FROM score_requests WHERE user_id = $1 AND event_id = $2`,
		userID, eventID, hash, board, at, period).Scan(&inserted, &recorded, &unchanged, &recordedPeriod)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// A concurrent request took the event id, not committed when the read began.
		return 0, false, "", unavailable("record an unchanged request", errors.New("the event id was recorded concurrently; retry"))
	case err != nil:
		return 0, false, "", unavailable("record an unchanged request", err)
	case inserted:
		return Accepted, true, period, nil
	}
	return seenBefore(recorded, hash), unchanged, deref(recordedPeriod), nil
}

// WasUnchanged reports whether a user's event id is recorded as a write answered
// "unchanged" (RecordUnchanged), and the period it was answered for ("" when recorded
// before the period was: the caller's current one stands in).
func (r *RequestLog) WasUnchanged(ctx context.Context, userID, eventID string) (bool, string, error) {
	var unchanged bool
	var period *string
	err := r.pool.QueryRow(ctx, `SELECT unchanged, period FROM score_requests WHERE user_id = $1 AND event_id = $2`, userID, eventID).Scan(&unchanged, &period)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", nil
	}
	return unchanged, deref(period), unavailable("look up request", err)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// MarkHoldTx records, in the transaction that accepts an admin's adjustment or removal,
// the board period whose entry its hold is on (Pending reads it).
func MarkHoldTx(ctx context.Context, tx *sql.Tx, userID, eventID, period string) error {
	_, err := tx.ExecContext(ctx, `UPDATE score_requests SET period = $3 WHERE user_id = $1 AND event_id = $2 AND NOT unchanged`, userID, eventID, period)
	return unavailable("mark hold", err)
}

// Pending reports whether the command recorded under a user's event id is an admin's
// adjustment or removal still on its way to a board period (accepted with its hold there,
// MarkHoldTx, and not applied yet): the projector takes its hold out once it applies it.
// A player's write, one answered unchanged, or a command for another board or period
// takes out no hold there.
func (r *RequestLog) Pending(ctx context.Context, userID, eventID, board, period string) (bool, error) {
	var ok bool
	err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM score_requests r
		WHERE r.user_id = $1 AND r.event_id = $2 AND r.board_id = $3 AND r.period = $4 AND NOT r.unchanged
		  AND NOT EXISTS (SELECT 1 FROM score_history h WHERE h.user_id = $1 AND h.event_id = $2))`, userID, eventID, board, period).Scan(&ok)
	return ok, unavailable("pending", err)
}

// AcceptedAgo tells how long before the query a user's event id was recorded, by
// PostgreSQL's clock alone; ErrNotFound when it was never recorded.
func (r *RequestLog) AcceptedAgo(ctx context.Context, userID, eventID string) (time.Duration, error) {
	var us int64
	err := r.pool.QueryRow(ctx, `SELECT (extract(epoch FROM now() - accepted_at) * 1000000)::bigint FROM score_requests WHERE user_id = $1 AND event_id = $2`,
		userID, eventID).Scan(&us)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotFound
	}
	return time.Duration(us) * time.Microsecond, unavailable("accepted ago", err)
}

// IsApplied reports whether a user's event has been applied to PostgreSQL.
func (r *RequestLog) IsApplied(ctx context.Context, userID, eventID string) (bool, error) {
	var ok bool
	err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM score_history WHERE user_id = $1 AND event_id = $2)`, userID, eventID).Scan(&ok)
	return ok, unavailable("is applied", err)
}

// Applied is where and how an event was applied (RequestLog.AppliedIn).
type Applied struct {
	// Period is the one the event was applied to: the one it was accepted for.
	Period string
	// Version is the user's entry's version there now (0 when there is none).
	Version int64
	// BeforeAcceptance: the event was applied before the request log's row of its event id
	// was written, so that row is of a retry accepted again after the event id's retention,
	// which the projector skips (the history outlives the request log).
	BeforeAcceptance bool
	// Value is the value (a delta on an increment board) the event was applied with.
	Value int64
}

// AppliedIn reports whether a user's event has been applied to a board and, if so, the
// period it was applied to and the version of the user's entry there now (0 when there is
// none). The period is the one the event was accepted for: a retry after a reset asks for
// the event of the period before (the request log's event ids outlive a period). The
// projector writes an event's history row and its entry in one transaction, so once the
// event is applied the entry's version is at least the one that event gave it: a mirror
// that shows that version or a newer one shows the event. Both times compared are
// PostgreSQL's: an event is applied in a transaction that starts after its acceptance
// committed.
func (r *RequestLog) AppliedIn(ctx context.Context, userID, eventID, board string) (Applied, bool, error) {
	var a Applied
	err := r.pool.QueryRow(ctx, `
		SELECT h.period, coalesce((SELECT e.version FROM board_entries e WHERE e.board_id = h.board_id AND e.period = h.period AND e.user_id = h.user_id), 0),
			coalesce(h.applied_at < (SELECT q.accepted_at FROM score_requests q WHERE q.user_id = h.user_id AND q.event_id = h.event_id), false),
			h.value
		FROM score_history h WHERE h.user_id = $1 AND h.event_id = $2 AND h.board_id = $3
		ORDER BY h.applied_at DESC LIMIT 1`,
		userID, eventID, board).Scan(&a.Period, &a.Version, &a.BeforeAcceptance, &a.Value)
	if errors.Is(err, pgx.ErrNoRows) {
		return Applied{}, false, nil
	}
	if err != nil {
		return Applied{}, false, unavailable("applied version", err)
	}
	return a, true, nil
}
