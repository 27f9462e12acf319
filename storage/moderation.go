package storage

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Ban is a banned user.
type Ban struct {
	UserID   string    `json:"user_id"`
	Reason   string    `json:"reason"`
	BannedBy string    `json:"banned_by"`
	BannedAt time.Time `json:"banned_at"`
}

// ErrNotBanned is an unban of a user who is not banned.
var ErrNotBanned = errors.New("user is not banned")

// SetBanned returns the work of a ban (banned true) or an unban in the transaction of the
// command that tells the projector to mirror the user's entries again (OpSync): the ban
// row, every entry of the user hidden (or shown) with a new version, the ban list's version
// bumped (into version, when not nil), and the audit record. It holds the user's lock
// (userLock) exclusively, so no projector batch writes the user's entries meanwhile, and
// one that starts after it sees the ban. An unban of a user who is not banned is
// ErrNotBanned.
func SetBanned(userID string, banned bool, audit AuditEntry, version *int64) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(`+userLock+`) FROM (SELECT $1::text AS u) k`, userID); err != nil {
			return unavailable("ban: lock", err)
		}
		if banned {
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO user_bans (user_id, reason, banned_by) VALUES ($1, $2, $3)
				ON CONFLICT (user_id) DO UPDATE SET reason = excluded.reason, banned_by = excluded.banned_by, banned_at = now()`,
				userID, audit.Reason, audit.Actor); err != nil {
				return unavailable("ban", err)
			}
		} else {
			res, err := tx.ExecContext(ctx, `DELETE FROM user_bans WHERE user_id = $1`, userID)
			if err != nil {
				return unavailable("unban", err)
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return ErrNotBanned
			}
		}
		res, err := tx.ExecContext(ctx, `UPDATE board_entries SET hidden = $2, version = version + 1 WHERE user_id = $1 AND hidden <> $2`, userID, banned)
		if err != nil {
			return unavailable("ban: entries", err)
		}
		n, _ := res.RowsAffected()
		if audit.Detail == nil {
			audit.Detail = map[string]any{}
		}
		audit.Detail["entries"] = n
		var v int64
		if err := tx.QueryRowContext(ctx, `UPDATE user_bans_state SET version = version + 1 RETURNING version`).Scan(&v); err != nil {
			return unavailable("ban: version", err)
		}
		if version != nil {
			*version = v
		}
		return RecordAuditTx(ctx, tx, audit)
	}
}

// RecordAuditTx writes an audit record within tx.
func RecordAuditTx(ctx context.Context, tx *sql.Tx, e AuditEntry) error {
	args, err := e.args()
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, insertAudit, args...)
	return unavailable("audit "+e.Action, err)
}

// Bans reads the ban list.
type Bans struct{ pool *pgxpool.Pool }

// NewBans returns the ban list in PostgreSQL.
func NewBans(pool *pgxpool.Pool) *Bans { return &Bans{pool: pool} }

// Version changes with every ban or unban, as it commits.
func (b *Bans) Version(ctx context.Context) (int64, error) {
	var v int64
	err := b.pool.QueryRow(ctx, `SELECT version FROM user_bans_state`).Scan(&v)
	return v, unavailable("ban list version", err)
}

// Users returns every banned user id and the version of the list they make, read in one
// statement (one snapshot).
func (b *Bans) Users(ctx context.Context) (map[string]bool, int64, error) {
	rows, err := b.pool.Query(ctx, `SELECT s.version, u.user_id FROM user_bans_state s LEFT JOIN user_bans u ON true`)
	if err != nil {
		return nil, 0, unavailable("ban list", err)
	}
	out := map[string]bool{}
	var v int64
	var u *string
	_, err = pgx.ForEachRow(rows, []any{&v, &u}, func() error {
		if u != nil {
			out[*u] = true
		}
		return nil
	})
	return out, v, unavailable("ban list", err)
}

// Get returns a user's ban, or ErrNotFound.
func (b *Bans) Get(ctx context.Context, userID string) (Ban, error) {
	var x Ban
	err := b.pool.QueryRow(ctx, `SELECT user_id, reason, banned_by, banned_at FROM user_bans WHERE user_id = $1`, userID).
		Scan(&x.UserID, &x.Reason, &x.BannedBy, &x.BannedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Ban{}, ErrNotFound
	}
	return x, unavailable("read ban", err)
}

// UserEntry is one of a user's entries: its board, period, score and whether a ban hides it.
type UserEntry struct {
	Board, Period string
	Score         int64
	Hidden        bool
}

// Entries returns every entry of a user, hidden or not.
func (b *Bans) Entries(ctx context.Context, userID string) ([]UserEntry, error) {
	rows, err := b.pool.Query(ctx, `SELECT board_id, period, score, hidden FROM board_entries WHERE user_id = $1`, userID)
	if err != nil {
		return nil, unavailable("user entries", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (UserEntry, error) {
		var e UserEntry
		err := row.Scan(&e.Board, &e.Period, &e.Score, &e.Hidden)
		return e, err
	})
	return out, unavailable("user entries", err)
}
