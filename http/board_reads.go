package http

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// Loader loads a board period Redis does not hold from PostgreSQL, and tells whether
// PostgreSQL has any entry of a board period.
type Loader interface {
	Reload(ctx context.Context, t storage.Target) (storage.Top, error)
	Exists(ctx context.Context, board, period string) (bool, error)
}

// BoardStore is what Reads reads a board period from: Redis (storage.Boards, which answers
// storage.ErrNotLoaded for a period it does not hold) or PostgreSQL (storage.Ranks).
type BoardStore interface {
	BoardReader
	Page(ctx context.Context, board, period string, after *storage.Position, size int) ([]storage.Entry, error)
	Around(ctx context.Context, board, period, userID string, n int) (storage.Entry, []storage.Entry, error)
}

// Reads answers reads of any board period: from Redis for the periods it keeps (loading
// a period it lost or let expire from PostgreSQL first, once per process however many
// readers wait), from PostgreSQL for older periods, and from PostgreSQL, marked degraded,
// while Redis is unavailable.
type Reads struct {
	cfg     configs.Config
	periods *Periods
	redis   BoardStore
	pg      BoardStore
	// closed reads the periods Redis does not keep (pg unless WithClosedPeriods).
	closed BoardStore
	loader Loader
	loads  singleflight.Group
	// postgres bounds the reads answered from PostgreSQL (pgReads).
	postgres *pgReads
}

// NewReads returns the read side over Redis (redis), PostgreSQL (pg) and the loader.
func NewReads(cfg configs.Config, periods *Periods, redis, pg BoardStore, loader Loader) *Reads {
	return &Reads{cfg: cfg, periods: periods, redis: redis, pg: pg, closed: pg, loader: loader,
		postgres: newPGReads(cfg.PostgresReads, postgresReadWait)}
}

// WithClosedPeriods makes r read the periods Redis does not keep from closed
// (storage.Ranks.Closed, which reads them through their rank index once frozen) instead
// of the reader of periods Redis is unavailable for, and returns r.
func (r *Reads) WithClosedPeriods(closed BoardStore) *Reads {
	r.closed = closed
	return r
}

// errUnknownBoard is a read of a board id that names no board.
var errUnknownBoard = errors.New("unknown board")

// top reads a board period's top; degraded says it came from PostgreSQL because Redis was
// unavailable. A match board without any entry is storage.ErrNotFound.
func (r *Reads) top(ctx context.Context, b configs.Board, period string, limit int) (top storage.Top, degraded bool, err error) {
	err = r.read(ctx, b, period, &degraded, func(src BoardStore) error {
		top, err = src.Top(ctx, b.Key(), period, limit)
		return err
	})
	return top, degraded, err
}

// user reads a user's entry on a board period (storage.ErrNotFound when there is none).
func (r *Reads) user(ctx context.Context, b configs.Board, period, userID string) (storage.Entry, bool, error) {
	return r.entry(ctx, b, period, userID, pgInTurn)
}

// entry reads a user's entry, reaching PostgreSQL as use says.
func (r *Reads) entry(ctx context.Context, b configs.Board, period, userID string, use postgresUse) (e storage.Entry, degraded bool, err error) {
	err = r.route(ctx, b, period, &degraded, func(src BoardStore) error {
		e, err = src.User(ctx, b.Key(), period, userID)
		return err
	}, use)
	return e, degraded, err
}

// errNoMatch is a read of a match that never had a point (404 unknown_board, also where
// other reads answer storage.ErrNotFound as a user without an entry).
var errNoMatch = errors.New("no such match (it never had an entry)")

// read runs one read against the right store; a read PostgreSQL answers takes its turn
// (fromPostgres).
func (r *Reads) read(ctx context.Context, b configs.Board, period string, degraded *bool, read func(BoardStore) error) error {
	return r.route(ctx, b, period, degraded, read, pgInTurn)
}

// postgresUse is how route lets a read reach PostgreSQL.
type postgresUse int

const (
	pgInTurn postgresUse = iota // in its turn (reads: fromPostgres)
	pgAtOnce                    // at once (the write path's answers: a write never waits for reads)
	pgNever                     // never: storage.ErrUnavailable instead
)

// route runs one read against the right store, reaching PostgreSQL as use says.
func (r *Reads) route(ctx context.Context, b configs.Board, period string, degraded *bool, read func(BoardStore) error, use postgresUse) error {
	pg := func(src BoardStore) error {
		switch use {
		case pgNever:
			return storage.ErrUnavailable
		case pgAtOnce:
			return read(src)
		}
		return r.fromPostgres(ctx, src, read)
	}
	ttl, hot, err := r.periods.InRedis(ctx, b, period)
	if err != nil {
		return err
	}
	if b.Period == configs.PeriodMatch {
		// A match exists from its first point: reads of another match id are 404, also
		// when Redis is down and PostgreSQL answers.
		err := read(r.redis)
		if !errors.Is(err, storage.ErrNotLoaded) && !errors.Is(err, storage.ErrUnavailable) {
			return err
		}
		switch ok, xerr := r.loader.Exists(ctx, b.Key(), period); {
		case xerr != nil:
			return xerr
		case !ok:
			*degraded = errors.Is(err, storage.ErrUnavailable) // PostgreSQL answered, for a Redis down
			return fmt.Errorf("match %q: %w: %w", b.Match, errNoMatch, storage.ErrNotFound)
		case errors.Is(err, storage.ErrUnavailable):
			return r.orFallback(err, degraded, pg)
		}
	}
	if !hot {
		if r.periods.NotBegun(ctx, b, period) {
			// A day or week ahead of this process's clock (another's may be past its
			// start): read as it is, never frozen as a closed period is on its first read.
			return pg(r.pg)
		}
		return pg(r.closed)
	}
	err = read(r.redis)
	if errors.Is(err, storage.ErrNotLoaded) {
		t := storage.Target{Board: b.Key(), Period: period, TTL: ttl}
		_, err, _ = r.loads.Do(t.Board+"\x00"+t.Period, func() (any, error) {
			// Other readers wait on this load: it does not end with this one's request.
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			return r.loader.Reload(lctx, t)
		})
		if err == nil {
			err = read(r.redis)
		}
	}
	return r.orFallback(err, degraded, pg)
}

// orFallback reads PostgreSQL instead when Redis was unavailable.
func (r *Reads) orFallback(err error, degraded *bool, pg func(BoardStore) error) error {
	if !errors.Is(err, storage.ErrUnavailable) {
		return err
	}
	*degraded = true
	return pg(r.pg)
}

// postgresReadWait is how long a read waits for its turn at PostgreSQL (pgReads).
const postgresReadWait = 5 * time.Second

// fromPostgres runs read against a PostgreSQL store in its turn: one read at a time of
// the request's player, at most LEADERBOARD_POSTGRES_READS of the process. A game
// server's (or an admin's) token reads for many players: it takes the process's turns
// only, as the process's own reads (the hub's, without a token) do.
func (r *Reads) fromPostgres(ctx context.Context, src BoardStore, read func(BoardStore) error) error {
	user := ""
	if c := claimsFrom(ctx); c != nil && !c.HasRole("server") && !c.HasRole("admin") {
		user = c.Subject
	}
	return r.postgres.do(ctx, user, func() error { return read(src) })
}

// page reads size entries in rank order after a position (nil: from the top).
func (r *Reads) page(ctx context.Context, b configs.Board, period string, after *storage.Position, size int) (es []storage.Entry, degraded bool, err error) {
	err = r.read(ctx, b, period, &degraded, func(src BoardStore) error {
		es, err = src.Page(ctx, b.Key(), period, after, size)
		return err
	})
	return es, degraded, err
}

// around reads a user's entry with its n neighbours on each side.
func (r *Reads) around(ctx context.Context, b configs.Board, period, userID string, n int) (me storage.Entry, es []storage.Entry, degraded bool, err error) {
	err = r.read(ctx, b, period, &degraded, func(src BoardStore) error {
		me, es, err = src.Around(ctx, b.Key(), period, userID, n)
		return err
	})
	return me, es, degraded, err
}

// answered reads a user's entry as user does, for a write's answer: from PostgreSQL at
// once when it answers (a write never waits for reads' turns).
func (r *Reads) answered(ctx context.Context, b configs.Board, period, userID string) (storage.Entry, bool, error) {
	return r.entry(ctx, b, period, userID, pgAtOnce)
}

// users reads the entries of the given users, in rank order.
func (r *Reads) users(ctx context.Context, b configs.Board, period string, ids []string) (es []storage.Entry, degraded bool, err error) {
	err = r.read(ctx, b, period, &degraded, func(src BoardStore) error {
		es, err = src.Users(ctx, b.Key(), period, ids)
		return err
	})
	return es, degraded, err
}

// Top reads a board period's top by board id (the hub's snapshots).
func (r *Reads) Top(ctx context.Context, board, period string, limit int) (storage.Top, error) {
	b, ok := r.cfg.Board(board)
	if !ok {
		return storage.Top{}, errUnknownBoard
	}
	top, _, err := r.top(ctx, b, period, limit)
	return top, err
}

// User reads a user's entry by board id (the hub's rank updates).
func (r *Reads) User(ctx context.Context, board, period, userID string) (storage.Entry, error) {
	b, ok := r.cfg.Board(board)
	if !ok {
		return storage.Entry{}, errUnknownBoard
	}
	e, _, err := r.user(ctx, b, period, userID)
	return e, err
}

// Users reads the entries the given users have on a board period by board id, in one
// read (the hub's refresh of its streams' own entries): users without one are left out.
func (r *Reads) Users(ctx context.Context, board, period string, userIDs []string) ([]storage.Entry, error) {
	b, ok := r.cfg.Board(board)
	if !ok {
		return nil, errUnknownBoard
	}
	es, _, err := r.users(ctx, b, period, userIDs)
	return es, err
}

// applied reads a user's entry to answer a write applied to it: as fast does, and from
// PostgreSQL for a period Redis does not keep (a retry of a write whose day is over, or a
// write the pipeline applied after its period left Redis); settled says it came from
// PostgreSQL, which shows every applied event.
func (r *Reads) applied(ctx context.Context, b configs.Board, period, userID string) (e storage.Entry, settled bool, err error) {
	if _, hot, err := r.periods.InRedis(ctx, b, period); err != nil {
		return storage.Entry{}, false, err
	} else if !hot {
		e, err := r.closed.User(ctx, b.Key(), period, userID)
		return e, true, err
	}
	e, err = r.fast(ctx, b, period, userID)
	return e, false, err
}

// held reads a user's entry from Redis as it is, without loading a period Redis does not
// hold: storage.ErrUnavailable for such a period (reads load it from PostgreSQL), for one
// Redis does not keep, and while Redis is down.
func (r *Reads) held(ctx context.Context, b configs.Board, period, userID string) (storage.Entry, error) {
	if _, hot, err := r.periods.InRedis(ctx, b, period); err != nil {
		return storage.Entry{}, err
	} else if !hot {
		return storage.Entry{}, storage.ErrUnavailable
	}
	e, err := r.redis.User(ctx, b.Key(), period, userID)
	if errors.Is(err, storage.ErrNotLoaded) {
		return e, fmt.Errorf("%s %s: %w", b.Key(), period, storage.ErrUnavailable)
	}
	return e, err
}

// fast reads a user's entry for the write path: Redis only (loading a period it does not
// hold), never PostgreSQL, so a Redis outage costs the write path nothing.
func (r *Reads) fast(ctx context.Context, b configs.Board, period, userID string) (storage.Entry, error) {
	e, _, err := r.entry(ctx, b, period, userID, pgNever)
	return e, err
}
