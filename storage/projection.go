package storage

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ScoreEvent is one command to apply to a board entry.
type ScoreEvent struct {
	EventID    string
	Board      string
	Period     string
	Operator   string // best, incr or set
	UserID     string
	NickName   string
	Value      int64
	OccurredAt time.Time
}

// EntryState is the absolute state of one board entry after a batch was applied.
type EntryState struct {
	Board     string
	Period    string
	UserID    string
	Score     int64
	Version   int64
	ReachedAt time.Time
	UpdatedAt time.Time
}

// AppliedBatch is what PostgreSQL holds for the entries a batch touched.
type AppliedBatch struct {
	// Entries has the current state of every entry an event of the batch names, new or
	// redelivered, so the Redis mirror can always be repaired from it.
	Entries []EntryState
	// NewEvents counts events applied for the first time (the others were redeliveries).
	NewEvents int
	// Fresh marks, by index into the batch, the events applied for the first time.
	Fresh []bool
	// MaxSeq is the highest history sequence number the batch added (0 when none).
	MaxSeq int64
	// NickNames maps users of the batch to the display name their events carried.
	NickNames map[string]string
	// Changed lists, per "board:period", the users whose entry this batch changed.
	Changed map[string][]string
}

type entryKey struct{ board, period, user string }

// Projection applies score events to the board tables, idempotently by event id.
type Projection struct {
	pool *pgxpool.Pool
}

// NewProjection returns the PostgreSQL side of the projector.
func NewProjection(pool *pgxpool.Pool) *Projection { return &Projection{pool: pool} }

// upserts by operator: each row of the batch is already aggregated per entry.
var upsertSQL = map[string]string{
	"best": `score = excluded.score, version = e.version + 1, reached_at = excluded.reached_at, updated_at = excluded.updated_at
		WHERE excluded.score > e.score OR (excluded.score = e.score AND excluded.reached_at < e.reached_at)`,
	"incr": `score = e.score + excluded.score, version = e.version + 1, reached_at = excluded.reached_at, updated_at = excluded.updated_at`,
	"set": `score = excluded.score, version = e.version + 1, reached_at = CASE WHEN excluded.score = e.score THEN e.reached_at ELSE excluded.reached_at END, updated_at = excluded.updated_at
		WHERE excluded.updated_at >= e.updated_at`,
}

// Apply records the events in the history (skipping event ids already there), folds the
// new ones into board_entries with each board's operator, and returns the state of every
// entry the batch names. It is one transaction.
func (p *Projection) Apply(ctx context.Context, events []ScoreEvent) (AppliedBatch, error) {
	var out AppliedBatch
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		n := len(events)
		ids, boards, periods, ops, users := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		values, times := make([]int64, n), make([]time.Time, n)
		for i, e := range events {
			if _, ok := upsertSQL[e.Operator]; !ok {
				return fmt.Errorf("apply: unknown operator %q", e.Operator)
			}
			ids[i], boards[i], periods[i], ops[i], users[i], values[i], times[i] = e.EventID, e.Board, e.Period, e.Operator, e.UserID, e.Value, e.OccurredAt
		}
		rows, err := tx.Query(ctx, `
			INSERT INTO score_history (event_id, board_id, period, operator, user_id, value, occurred_at)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::timestamptz[])
			ON CONFLICT (user_id, event_id, board_id, period) DO NOTHING
			RETURNING user_id, event_id, board_id, period, seq`, ids, boards, periods, ops, users, values, times)
		if err != nil {
			return err
		}
		type histKey struct{ user, id, board, period string }
		fresh := map[histKey]bool{}
		for rows.Next() {
			var k histKey
			var seq int64
			if err := rows.Scan(&k.user, &k.id, &k.board, &k.period, &seq); err != nil {
				rows.Close()
				return err
			}
			fresh[k] = true
			out.MaxSeq = max(out.MaxSeq, seq)
		}
		if err := rows.Err(); err != nil {
			return err
		}

		agg := map[entryKey]*ScoreEvent{}
		var keys []entryKey
		out.NickNames = map[string]string{}
		out.Fresh = make([]bool, len(events))
		for i := range events {
			e := &events[i]
			k := entryKey{e.Board, e.Period, e.UserID}
			if e.NickName != "" {
				out.NickNames[e.UserID] = e.NickName
			}
			if _, seen := agg[k]; !seen {
				keys = append(keys, k)
			}
			if !fresh[histKey{e.UserID, e.EventID, e.Board, e.Period}] {
				if _, seen := agg[k]; !seen {
					agg[k] = nil
				}
				continue
			}
			delete(fresh, histKey{e.UserID, e.EventID, e.Board, e.Period}) // an event id twice in one batch counts once
			out.NewEvents++
			out.Fresh[i] = true
			agg[k] = fold(agg[k], *e)
		}
		// A stable lock order keeps concurrent batches from deadlocking.
		sort.Slice(keys, func(i, j int) bool {
			a, b := keys[i], keys[j]
			if a.board != b.board {
				return a.board < b.board
			}
			if a.period != b.period {
				return a.period < b.period
			}
			return a.user < b.user
		})
		byOp := map[string][]*ScoreEvent{}
		for _, k := range keys {
			if e := agg[k]; e != nil {
				byOp[e.Operator] = append(byOp[e.Operator], e)
			}
		}
		// One round trip: the upserts, the nick names, then the state of every entry.
		b := &pgx.Batch{}
		out.Changed = map[string][]string{}
		for op, es := range byOp {
			queueUpsert(b, op, es, out.Changed)
		}
		queueNickNames(b, out.NickNames)
		entries := queueLoadEntries(b, keys)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		out.Entries = *entries
		return nil
	})
	if err != nil {
		return AppliedBatch{}, unavailable("apply score batch", err)
	}
	return out, nil
}

// fold combines a new event into the aggregate of its entry within one batch.
func fold(acc *ScoreEvent, e ScoreEvent) *ScoreEvent {
	if acc == nil {
		return &e
	}
	switch e.Operator {
	case "best":
		if e.Value > acc.Value || e.Value == acc.Value && e.OccurredAt.Before(acc.OccurredAt) {
			acc.Value, acc.OccurredAt = e.Value, e.OccurredAt
		}
	case "incr":
		acc.Value += e.Value
		acc.OccurredAt = maxTime(acc.OccurredAt, e.OccurredAt)
	case "set":
		if !e.OccurredAt.Before(acc.OccurredAt) {
			acc.Value, acc.OccurredAt = e.Value, e.OccurredAt
		}
	}
	return acc
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// queueUpsert folds the aggregated events of one operator into board_entries and
// records, per board and period, the users whose entry changed.
func queueUpsert(b *pgx.Batch, op string, es []*ScoreEvent, changed map[string][]string) {
	n := len(es)
	boards, periods, users := make([]string, n), make([]string, n), make([]string, n)
	scores, times := make([]int64, n), make([]time.Time, n)
	for i, e := range es {
		boards[i], periods[i], users[i], scores[i], times[i] = e.Board, e.Period, e.UserID, e.Value, e.OccurredAt
	}
	b.Queue(`
		INSERT INTO board_entries AS e (board_id, period, user_id, score, version, reached_at, updated_at)
		SELECT b, p, u, s, 1, t, t FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[]) AS x(b, p, u, s, t)
		ON CONFLICT (board_id, period, user_id) DO UPDATE SET `+upsertSQL[op]+`
		RETURNING board_id, period, user_id`,
		boards, periods, users, scores, times).Query(func(rows pgx.Rows) error {
		var board, period, user string
		_, err := pgx.ForEachRow(rows, []any{&board, &period, &user}, func() error {
			changed[board+":"+period] = append(changed[board+":"+period], user)
			return nil
		})
		return err
	})
}

func queueNickNames(b *pgx.Batch, names map[string]string) {
	if len(names) == 0 {
		return
	}
	users := make([]string, 0, len(names))
	for u := range names {
		users = append(users, u)
	}
	sort.Strings(users)
	nicks := make([]string, len(users))
	for i, u := range users {
		nicks[i] = names[u]
	}
	b.Queue(`
		INSERT INTO users (user_id, nick_name) SELECT * FROM unnest($1::text[], $2::text[])
		ON CONFLICT (user_id) DO UPDATE SET nick_name = excluded.nick_name, updated_at = now()
		WHERE users.nick_name IS DISTINCT FROM excluded.nick_name`, users, nicks)
}

// queueLoadEntries queues the read of the entries' current state; the slice is filled
// when the batch's results are read.
func queueLoadEntries(b *pgx.Batch, keys []entryKey) *[]EntryState {
	n := len(keys)
	boards, periods, users := make([]string, n), make([]string, n), make([]string, n)
	for i, k := range keys {
		boards[i], periods[i], users[i] = k.board, k.period, k.user
	}
	out := new([]EntryState)
	b.Queue(`
		SELECT e.board_id, e.period, e.user_id, e.score, e.version, e.reached_at, e.updated_at
		FROM board_entries e
		JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(b, p, u) ON e.board_id = k.b AND e.period = k.p AND e.user_id = k.u`,
		boards, periods, users).Query(func(rows pgx.Rows) error {
		var err error
		*out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (EntryState, error) {
			var s EntryState
			err := r.Scan(&s.Board, &s.Period, &s.UserID, &s.Score, &s.Version, &s.ReachedAt, &s.UpdatedAt)
			return s, err
		})
		return err
	})
	return out
}

// IsApplied reports whether a user's event has been applied to PostgreSQL.
func (p *Projection) IsApplied(ctx context.Context, userID, eventID string) (bool, error) {
	var ok bool
	err := p.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM score_history WHERE user_id = $1 AND event_id = $2)`, userID, eventID).Scan(&ok)
	return ok, unavailable("is applied", err)
}
