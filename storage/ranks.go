package storage

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Ranks answers top-N and rank reads from PostgreSQL, for when Redis is unavailable.
// The order is the Redis one: score descending, reached first, user id descending.
type Ranks struct {
	pool *pgxpool.Pool
}

// NewRanks returns the PostgreSQL read side.
func NewRanks(pool *pgxpool.Pool) *Ranks { return &Ranks{pool: pool} }

// Top returns the first limit entries of a board. Version is 0: versions belong to the
// Redis top.
func (r *Ranks) Top(ctx context.Context, board, period string, limit int) (Top, error) {
	rows, err := r.pool.Query(ctx, `
		SELECT e.user_id, e.score, e.updated_at, coalesce(u.nick_name, '')
		FROM board_entries e LEFT JOIN users u ON u.user_id = e.user_id
		WHERE (e.board_id || ':' || e.period) = $1
		ORDER BY (e.board_id || ':' || e.period), e.score DESC, e.reached_at ASC, e.user_id DESC
		LIMIT $2`, board+":"+period, limit)
	if err != nil {
		return Top{}, unavailable("top from postgres", err)
	}
	entries, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) {
		var e Entry
		err := row.Scan(&e.UserID, &e.Score, &e.UpdatedAt, &e.NickName)
		return e, err
	})
	if err != nil {
		return Top{}, unavailable("top from postgres", err)
	}
	top := Top{Entries: entries}
	for i := range top.Entries {
		top.Entries[i].Rank = int64(i + 1)
		if top.Entries[i].UpdatedAt.After(top.UpdatedAt) {
			top.UpdatedAt = top.Entries[i].UpdatedAt
		}
	}
	return top, nil
}

// User returns a user's entry and rank (1 + the count of entries ranked above), or
// ErrNotFound.
func (r *Ranks) User(ctx context.Context, board, period, userID string) (Entry, error) {
	e := Entry{UserID: userID}
	err := r.pool.QueryRow(ctx, `
		WITH me AS (
			SELECT score, reached_at, updated_at FROM board_entries
			WHERE board_id = $1 AND period = $2 AND user_id = $3
		)
		SELECT me.score, me.updated_at, 1 + (
			SELECT count(*) FROM board_entries o
			WHERE (o.board_id || ':' || o.period) = $1 || ':' || $2
			  AND (o.score > me.score
			    OR (o.score = me.score AND o.reached_at < me.reached_at)
			    OR (o.score = me.score AND o.reached_at = me.reached_at AND o.user_id > $3))
		) FROM me`, board, period, userID).Scan(&e.Score, &e.UpdatedAt, &e.Rank)
	if errors.Is(err, pgx.ErrNoRows) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, unavailable("rank from postgres", err)
	}
	return e, nil
}

// page reads board entries in user id order after afterUser, with nick names.
func (r *Ranks) page(ctx context.Context, board, period, afterUser string, limit int, random bool) ([]EntryState, map[string]string, error) {
	q := `SELECT e.board_id, e.period, e.user_id, e.score, e.version, e.reached_at, e.updated_at, coalesce(u.nick_name, '')
		FROM board_entries e LEFT JOIN users u ON u.user_id = e.user_id
		WHERE e.board_id = $1 AND e.period = $2 AND e.user_id > $3 ORDER BY e.user_id LIMIT $4`
	if random {
		q = `SELECT e.board_id, e.period, e.user_id, e.score, e.version, e.reached_at, e.updated_at, coalesce(u.nick_name, '')
		FROM board_entries e LEFT JOIN users u ON u.user_id = e.user_id
		WHERE e.board_id = $1 AND e.period = $2 AND e.user_id > $3 ORDER BY random() LIMIT $4`
	}
	rows, err := r.pool.Query(ctx, q, board, period, afterUser, limit)
	if err != nil {
		return nil, nil, unavailable("read board entries", err)
	}
	nicks := map[string]string{}
	states, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (EntryState, error) {
		var s EntryState
		var nick string
		err := row.Scan(&s.Board, &s.Period, &s.UserID, &s.Score, &s.Version, &s.ReachedAt, &s.UpdatedAt, &nick)
		if nick != "" {
			nicks[s.UserID] = nick
		}
		return s, err
	})
	return states, nicks, unavailable("read board entries", err)
}

// count returns how many entries a board holds in PostgreSQL.
func (r *Ranks) count(ctx context.Context, board, period string) (int64, error) {
	var n int64
	err := r.pool.QueryRow(ctx, `SELECT count(*) FROM board_entries WHERE board_id = $1 AND period = $2`, board, period).Scan(&n)
	return n, unavailable("count board entries", err)
}

// maxSeq is the newest history sequence number: top versions after a rebuild start above
// it, so they stay above the versions clients have seen even when Redis lost them.
func (r *Ranks) maxSeq(ctx context.Context) (int64, error) {
	var n int64
	err := r.pool.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM score_history`).Scan(&n)
	return n, unavailable("max history sequence", err)
}
