package storage

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// rankOrder is how a PostgreSQL read finds a board period's entries in rank order.
//
// No index covers the columns a score changes (migration 0009: so that the projector's
// updates are HOT). An open period's entries are sorted at each read (sorted); a closed
// one, once frozen, is read through board_entries_closed_rank (frozen), which covers the
// copy of sort_key and reached_at that a freeze writes into closed_sort_key and
// closed_reached_at.
//
// Queries are written once with placeholders for an alias a: {a.in} is "a is an entry of
// the board period @b, @p", {a.k} its sort key, {a.r} the time it reached it, {a.order}
// the rank order (best first) and {a.rorder} the reverse.
type rankOrder struct{ frozen bool }

var (
	sorted = rankOrder{}
	frozen = rankOrder{frozen: true}
)

var rankSQLCache sync.Map // rankSQLKey -> string

type rankSQLKey struct {
	q      string
	frozen bool
}

// sql fills q's placeholders for the aliases e and o (cached: queries are constants).
func (o rankOrder) sql(q string) string {
	if s, ok := rankSQLCache.Load(rankSQLKey{q, o.frozen}); ok {
		return s.(string)
	}
	var pairs []string
	for _, a := range []string{"e", "o"} {
		k, r := a+".sort_key", a+".reached_at"
		in := a + ".board_id = @b AND " + a + ".period = @p"
		order := k + " DESC, " + r + " ASC, " + a + ".user_id DESC"
		rorder := k + " ASC, " + r + " DESC, " + a + ".user_id ASC"
		if o.frozen {
			// The index's expression, and its predicate (visible_entries adds NOT hidden).
			k, r = a+".closed_sort_key", a+".closed_reached_at"
			part := "(" + a + ".board_id || ':' || " + a + ".period)"
			in = part + " = @b || ':' || @p AND " + k + " IS NOT NULL"
			order = part + ", " + k + " DESC, " + r + " ASC, " + a + ".user_id DESC"
			rorder = part + ", " + k + " ASC, " + r + " DESC, " + a + ".user_id ASC"
		}
		pairs = append(pairs, "{"+a+".in}", in, "{"+a+".k}", k, "{"+a+".r}", r, "{"+a+".order}", order, "{"+a+".rorder}", rorder)
	}
	s := strings.NewReplacer(pairs...).Replace(q)
	rankSQLCache.Store(rankSQLKey{q, o.frozen}, s)
	return s
}

// freezeBatch is how many entries one transaction of a freeze copies.
const freezeBatch = 5000

// order says how to read a board period: frozen when r reads closed periods and none of
// the period's entries is left to freeze; otherwise sorted, and for closed periods a
// freeze of the period starts in the background (once per period at a time).
func (r *Ranks) order(ctx context.Context, board, period string) (rankOrder, error) {
	if !r.closed {
		return sorted, nil
	}
	unfrozen, err := r.unfrozen(ctx, board, period)
	if err != nil {
		return sorted, err
	}
	if !unfrozen {
		return frozen, nil
	}
	// DoChan runs the freeze in a goroutine of its own, once however many reads come
	// meanwhile; they do not wait for it (nor keep a goroutine each).
	r.freezes.DoChan(board+"\x00"+period, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
		defer cancel()
		n, err := r.Freeze(fctx, board, period)
		if err != nil {
			r.logger.Warn("freezing a closed period's ranks failed (its reads sort it meanwhile)", "board", board, "period", period, "frozen", n, "err", err)
		}
		return nil, nil
	})
	return sorted, nil
}

// Freeze copies the rank of every entry of a board period not frozen yet into the columns
// board_entries_closed_rank covers, freezeBatch entries per transaction, and returns how
// many it froze. Only closed periods should be frozen: the projector keeps a frozen
// entry's copy current, which makes its writes to it ordinary (not HOT) updates.
func (r *Ranks) Freeze(ctx context.Context, board, period string) (int64, error) {
	var total int64
	for {
		tag, err := r.pool.Exec(ctx, `
			UPDATE board_entries SET closed_sort_key = sort_key, closed_reached_at = reached_at
			WHERE ctid = ANY (ARRAY(
				SELECT ctid FROM board_entries WHERE board_id = $1 AND period = $2 AND closed_sort_key IS NULL
				LIMIT $3 FOR UPDATE SKIP LOCKED))`, board, period, freezeBatch)
		if err != nil {
			return total, unavailable("freeze period", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() == 0 {
			// Entries locked by the projector were skipped: done when none is left.
			left, err := r.unfrozen(ctx, board, period)
			if err != nil {
				return total, err
			}
			if !left {
				return total, nil
			}
			select {
			case <-ctx.Done():
				return total, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// unfrozen says whether any entry of a board period is not frozen (board_entries_unfrozen
// answers it from an index of the entries left to freeze).
func (r *Ranks) unfrozen(ctx context.Context, board, period string) (bool, error) {
	var ok bool
	err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM board_entries WHERE board_id = $1 AND period = $2 AND closed_sort_key IS NULL)`,
		board, period).Scan(&ok)
	return ok, unavailable("entries left to freeze", err)
}

// rankArgs are the named arguments of a rank query of a board period.
func rankArgs(board, period string, more pgx.NamedArgs) pgx.NamedArgs {
	args := pgx.NamedArgs{"b": board, "p": period}
	for k, v := range more {
		args[k] = v
	}
	return args
}
