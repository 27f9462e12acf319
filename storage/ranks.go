package storage

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/singleflight"
)

// Ranks answers top-N and rank reads from PostgreSQL: for periods not kept in Redis, and
// for every period while Redis is unavailable. The order is the Redis one: sort key
// descending, reached first, user id descending. NewRanks sorts a period's entries at
// each read; Closed reads closed periods through their rank index (rankOrder).
type Ranks struct {
	pool    *pgxpool.Pool
	closed  bool
	freezes *singleflight.Group
	logger  *slog.Logger
}

// NewRanks returns the PostgreSQL read side; it logs through slog's default logger until
// WithLogger gives it another.
func NewRanks(pool *pgxpool.Pool) *Ranks {
	return &Ranks{pool: pool, freezes: &singleflight.Group{}, logger: slog.Default()}
}

// WithLogger returns r logging through logger (a background freeze that failed), or
// through r's logger when logger is nil.
func (r *Ranks) WithLogger(logger *slog.Logger) *Ranks {
	c := *r
	if logger != nil {
		c.logger = logger
	}
	return &c
}

// Closed returns the reader of closed periods (those not in Redis because they ended):
// a period's first read freezes it, and once frozen its reads go through the rank index.
func (r *Ranks) Closed() *Ranks {
	c := *r
	c.closed = true
	return &c
}

// Top returns the first limit entries of a board period. Version is 0: versions belong to
// the Redis top.
func (r *Ranks) Top(ctx context.Context, board, period string, limit int) (Top, error) {
	order, err := r.order(ctx, board, period)
	if err != nil {
		return Top{}, err
	}
	rows, err := r.pool.Query(ctx, order.sql(`
		SELECT e.user_id, e.score, e.updated_at, coalesce(u.nick_name, ''), e.metadata
		FROM visible_entries e LEFT JOIN users u ON u.user_id = e.user_id
		WHERE {e.in}
		ORDER BY {e.order}
		LIMIT @n`), rankArgs(board, period, pgx.NamedArgs{"n": limit}))
	if err != nil {
		return Top{}, unavailable("top from postgres", err)
	}
	entries, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) {
		var e Entry
		var meta []byte
		err := row.Scan(&e.UserID, &e.Score, &e.UpdatedAt, &e.NickName, &meta)
		if len(meta) > 0 {
			e.Metadata = meta
		}
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
	order, err := r.order(ctx, board, period)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{UserID: userID}
	var meta []byte
	err = r.pool.QueryRow(ctx, order.sql(`
		WITH me AS (
			SELECT sort_key, score, reached_at, updated_at, metadata FROM visible_entries
			WHERE board_id = @b AND period = @p AND user_id = @u
		)
		SELECT me.score, me.updated_at, me.metadata, 1 + (
			SELECT count(*) FROM visible_entries o
			WHERE {o.in}
			  AND ({o.k} > me.sort_key
			    OR ({o.k} = me.sort_key AND {o.r} < me.reached_at)
			    OR ({o.k} = me.sort_key AND {o.r} = me.reached_at AND o.user_id > @u))
		) FROM me`), rankArgs(board, period, pgx.NamedArgs{"u": userID})).Scan(&e.Score, &e.UpdatedAt, &meta, &e.Rank)
	if errors.Is(err, pgx.ErrNoRows) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, unavailable("rank from postgres", err)
	}
	if len(meta) > 0 {
		e.Metadata = meta
	}
	return e, nil
}

// Exists reports whether a board period ever had an entry in PostgreSQL: one shown, a
// banned user's (hidden) or one removed since. A match whose players were all banned or
// removed still exists (an empty board), as Redis answers it while it holds the match.
func (r *Ranks) Exists(ctx context.Context, board, period string) (bool, error) {
	var ok bool
	err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM board_entries WHERE board_id = $1 AND period = $2)
		OR EXISTS (SELECT 1 FROM removed_entries WHERE board_id = $1 AND period = $2)`, board, period).Scan(&ok)
	return ok, unavailable("board exists", err)
}

// pages returns a reader of a board period's entries in user id order, page by page, with
// their nick names; it returns an empty page at the end.
func (r *Ranks) pages(ctx context.Context, board, period string, size int) func() ([]EntryState, map[string]string, error) {
	after := ""
	return func() ([]EntryState, map[string]string, error) {
		states, nicks, err := r.page(ctx, board, period, after, size, false)
		if len(states) > 0 {
			after = states[len(states)-1].UserID
		}
		return states, nicks, err
	}
}

// page reads board entries in user id order after afterUser (or a random sample), with
// nick names.
func (r *Ranks) page(ctx context.Context, board, period, afterUser string, limit int, random bool) ([]EntryState, map[string]string, error) {
	order := "e.user_id"
	if random {
		order = "random()"
	}
	rows, err := r.pool.Query(ctx, `SELECT `+entryColumns+`, coalesce(u.nick_name, '')
		FROM visible_entries e LEFT JOIN users u ON u.user_id = e.user_id
		WHERE e.board_id = $1 AND e.period = $2 AND e.user_id > $3 ORDER BY `+order+` LIMIT $4`, board, period, afterUser, limit)
	if err != nil {
		return nil, nil, unavailable("read board entries", err)
	}
	return collectNamed(rows)
}

// collectNamed reads rows of entryColumns and a nick name (empty for none): the entries, and
// the nick names by user.
func collectNamed(rows pgx.Rows) ([]EntryState, map[string]string, error) {
	nicks := map[string]string{}
	states, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (EntryState, error) {
		var s EntryState
		var meta []byte
		var nick string
		err := row.Scan(&s.Board, &s.Period, &s.UserID, &s.Score, &s.SortKey, &s.Version, &s.ReachedAt, &s.UpdatedAt, &meta, &s.Hidden, &nick)
		if len(meta) > 0 {
			s.Metadata = meta
		}
		if nick != "" {
			nicks[s.UserID] = nick
		}
		return s, err
	})
	return states, nicks, unavailable("read board entries", err)
}

// statesOf reads the users' visible entries of a board period (users without one left
// out), and the nick names of those who have one.
func (r *Ranks) statesOf(ctx context.Context, board, period string, users []string) ([]EntryState, map[string]string, error) {
	rows, err := r.pool.Query(ctx, `SELECT `+entryColumns+`, coalesce(u.nick_name, '')
		FROM visible_entries e LEFT JOIN users u ON u.user_id = e.user_id
		WHERE e.board_id = $1 AND e.period = $2 AND e.user_id = ANY($3) ORDER BY e.user_id`, board, period, users)
	if err != nil {
		return nil, nil, unavailable("read board entries", err)
	}
	return collectNamed(rows)
}

// absent returns those of users without a visible entry of the board period.
func (r *Ranks) absent(ctx context.Context, board, period string, users []string) ([]string, error) {
	if len(users) == 0 {
		return nil, nil
	}
	rows, err := r.pool.Query(ctx, `SELECT u FROM unnest($3::text[]) AS u
		WHERE NOT EXISTS (SELECT 1 FROM visible_entries e WHERE e.board_id = $1 AND e.period = $2 AND e.user_id = u)`, board, period, users)
	if err != nil {
		return nil, unavailable("read board entries", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return out, unavailable("read board entries", err)
}

// pendingHolds lists the users and event ids of the admin adjustments and removals
// accepted for a board period and neither applied nor dead-lettered yet
// (RequestLog.Pending, all of the period's).
func (r *Ranks) pendingHolds(ctx context.Context, board, period string) ([][2]string, error) {
	rows, err := r.pool.Query(ctx, `SELECT q.user_id, q.event_id FROM score_requests q
		WHERE q.board_id = $1 AND q.period = $2 AND q.period IS NOT NULL AND NOT q.unchanged
		  AND NOT EXISTS (SELECT 1 FROM score_history h WHERE h.user_id = q.user_id AND h.event_id = q.event_id)
		  AND NOT EXISTS (SELECT 1 FROM dead_letters l WHERE l.user_id = q.user_id AND l.event_id = q.event_id)`, board, period)
	if err != nil {
		return nil, unavailable("pending holds", err)
	}
	held, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([2]string, error) {
		var h [2]string
		return h, row.Scan(&h[0], &h[1])
	})
	return held, unavailable("pending holds", err)
}

// count returns how many entries a board period holds in PostgreSQL.
func (r *Ranks) count(ctx context.Context, board, period string) (int64, error) {
	var n int64
	err := r.pool.QueryRow(ctx, `SELECT count(*) FROM visible_entries WHERE board_id = $1 AND period = $2`, board, period).Scan(&n)
	return n, unavailable("count board entries", err)
}
