package storage

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Anomaly is one refused write: why, whose, where.
type Anomaly struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	Reason  string    `json:"reason"`
	UserID  string    `json:"user_id"`
	Board   string    `json:"board"`
	EventID string    `json:"event_id,omitempty"`
	Detail  string    `json:"detail"`
}

// Anomalies is the bounded store of refused writes.
type Anomalies struct{ pool *pgxpool.Pool }

// NewAnomalies returns the anomaly store in PostgreSQL.
func NewAnomalies(pool *pgxpool.Pool) *Anomalies { return &Anomalies{pool: pool} }

// Insert records anomalies in one statement.
func (a *Anomalies) Insert(ctx context.Context, xs []Anomaly) error {
	n := len(xs)
	at, reasons, users, boards, events, details := make([]time.Time, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, x := range xs {
		at[i], reasons[i], users[i], boards[i], events[i], details[i] = x.At, x.Reason, x.UserID, x.Board, x.EventID, x.Detail
	}
	_, err := a.pool.Exec(ctx, `
		INSERT INTO anomalies (at, reason, user_id, board_id, event_id, detail)
		SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])`,
		at, reasons, users, boards, events, details)
	return unavailable("record anomalies", err)
}

// Page returns up to limit anomalies older than before (0: the newest), newest first,
// of one user and one reason when given.
func (a *Anomalies) Page(ctx context.Context, before int64, limit int, userID, reason string) ([]Anomaly, error) {
	rows, err := a.pool.Query(ctx, `
		SELECT id, at, reason, user_id, board_id, event_id, detail FROM anomalies
		WHERE ($1::bigint = 0 OR id < $1::bigint) AND ($3 = '' OR user_id = $3) AND ($4 = '' OR reason = $4)
		ORDER BY id DESC LIMIT $2`, before, limit, userID, reason)
	if err != nil {
		return nil, unavailable("read anomalies", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Anomaly, error) {
		var x Anomaly
		err := r.Scan(&x.ID, &x.At, &x.Reason, &x.UserID, &x.Board, &x.EventID, &x.Detail)
		x.At = x.At.UTC()
		return x, err
	})
	return out, unavailable("read anomalies", err)
}

// Prune deletes all but the newest keep anomalies and returns how many it deleted.
func (a *Anomalies) Prune(ctx context.Context, keep int) (int64, error) {
	var cutoff int64
	switch err := a.pool.QueryRow(ctx, `SELECT id FROM anomalies ORDER BY id DESC OFFSET $1 LIMIT 1`, keep).Scan(&cutoff); {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil // no more than keep
	case err != nil:
		return 0, unavailable("prune anomalies", err)
	}
	// A batch at a time, oldest first: a flood of refused writes between two passes is
	// not one long DELETE.
	var total int64
	for {
		tag, err := a.pool.Exec(ctx, `DELETE FROM anomalies WHERE id IN (
			SELECT id FROM anomalies WHERE id <= $1 ORDER BY id LIMIT $2)`, cutoff, pruneBatch)
		if err != nil {
			return total, unavailable("prune anomalies", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch || ctx.Err() != nil {
			return total, nil
		}
	}
}
