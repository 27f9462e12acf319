package http

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// SeasonStore keeps the seasons admins start.
type SeasonStore interface {
	All(ctx context.Context) ([]storage.Season, error)
	Start(ctx context.Context, board, name, actor, reason string) (storage.Season, error)
}

// Errors of period resolution, mapped to answers by the handlers.
var (
	// errBadPeriod: the period id is malformed, or names a date that does not exist.
	errBadPeriod = errors.New("invalid period")
	// errUnknownPeriod: a well-formed season that was never started.
	errUnknownPeriod = errors.New("no such period")
)

// seasonsMaxAge bounds how stale an API process's view of the seasons may be: a season an
// admin starts through another process becomes current here within it.
const seasonsMaxAge = time.Second

// staleSeasonsWait is how long a request waits for a listing of the seasons when it has an
// older view to answer from.
const staleSeasonsWait = 200 * time.Millisecond

// Periods decides periods with the board rules: the current period of a board (the
// period an event accepted now counts for), what a ?period= names, and whether Redis keeps
// a period or reads go to PostgreSQL.
type Periods struct {
	cfg     configs.Config
	seasons SeasonStore
	now     func() time.Time

	mu      sync.Mutex
	known   map[string][]string // board -> started seasons, oldest first ("1" implied)
	fetched time.Time
	// started counts the seasons this process started: a listing begun before the last one
	// is not kept (it may have read the seasons before that one), nor shared with readers
	// after it.
	started uint64
	group   singleflight.Group
}

// NewPeriods returns the period rules of cfg's boards, with seasons from the store.
func NewPeriods(cfg configs.Config, seasons SeasonStore, now func() time.Time) *Periods {
	if now == nil {
		now = time.Now
	}
	return &Periods{cfg: cfg, seasons: seasons, now: now}
}

// seasonsOf returns a season board's seasons, oldest first, starting with "1". With
// mayBeStale (reads), a view older than seasonsMaxAge answers when a new listing takes
// longer than staleSeasonsWait; a write waits for the listing.
func (p *Periods) seasonsOf(ctx context.Context, board string, mayBeStale bool) ([]string, error) {
	p.mu.Lock()
	fresh := p.known != nil && p.now().Sub(p.fetched) < seasonsMaxAge && !p.now().Before(p.fetched)
	known, started := p.known, p.started
	p.mu.Unlock()
	if !fresh {
		ch := p.group.DoChan("seasons:"+strconv.FormatUint(started, 10), func() (any, error) {
			// Other requests wait on this listing: it does not end with this one's.
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			all, err := p.seasons.All(lctx)
			if err != nil {
				return nil, err
			}
			m := map[string][]string{}
			for _, s := range all {
				m[s.Board] = append(m[s.Board], s.Name)
			}
			p.mu.Lock()
			if p.started == started {
				p.known, p.fetched = m, p.now()
			}
			p.mu.Unlock()
			return m, nil
		})
		// With a view to fall back on, a slow listing (PostgreSQL hanging) holds a read up
		// for staleSeasonsWait at most, not for the listing's 10 s: reads of season boards
		// come from Redis. A write waits: it must not count for a season that ended.
		var stale <-chan time.Time
		if known != nil && mayBeStale {
			t := time.NewTimer(staleSeasonsWait)
			defer t.Stop()
			stale = t.C
		}
		select {
		case r := <-ch:
			if r.Err == nil {
				known = r.Val.(map[string][]string)
			} else if known == nil {
				return nil, r.Err
			}
		case <-stale:
		case <-ctx.Done():
			if known == nil || !mayBeStale {
				return nil, ctx.Err()
			}
		}
	}
	return append([]string{configs.FirstSeason}, known[board]...), nil
}

// Current is the period of b an event accepted now counts for.
func (p *Periods) Current(ctx context.Context, b configs.Board) (string, error) {
	return p.CurrentAt(ctx, b, p.now())
}

// CurrentAt is the period of b an event accepted at counts for (the seasons as they are
// now, for a read: see seasonsOf).
func (p *Periods) CurrentAt(ctx context.Context, b configs.Board, at time.Time) (string, error) {
	return p.currentAt(ctx, b, at, true)
}

// WriteAt is the period of b a write accepted at counts for (the seasons as they are now).
func (p *Periods) WriteAt(ctx context.Context, b configs.Board, at time.Time) (string, error) {
	return p.currentAt(ctx, b, at, false)
}

func (p *Periods) currentAt(ctx context.Context, b configs.Board, at time.Time, mayBeStale bool) (string, error) {
	season := ""
	if b.Period == configs.PeriodSeason {
		seasons, err := p.seasonsOf(ctx, b.ID, mayBeStale)
		if err != nil {
			return "", err
		}
		season = seasons[len(seasons)-1]
	}
	return b.PeriodAt(at, p.cfg.Timezone, season), nil
}

// Previous is the period before the current one (false when there is none).
func (p *Periods) Previous(ctx context.Context, b configs.Board) (string, bool, error) {
	_, prev, ok, err := p.CurrentAndPrevious(ctx, b, p.now())
	return prev, ok, err
}

// CurrentAndPrevious are the period an event accepted at counts for and the one before it
// (ok false when there is none), from one reading of the seasons: an answer naming both
// never has them equal because a season started between two readings.
func (p *Periods) CurrentAndPrevious(ctx context.Context, b configs.Board, at time.Time) (cur, prev string, ok bool, err error) {
	switch b.Period {
	case configs.PeriodDaily, configs.PeriodWeekly:
		cur = b.PeriodAt(at, p.cfg.Timezone, "")
		prev, ok = b.ShiftPeriod(cur, -1)
		return cur, prev, ok, nil
	case configs.PeriodSeason:
		seasons, err := p.seasonsOf(ctx, b.ID, true)
		if err != nil {
			return "", "", false, err
		}
		cur = seasons[len(seasons)-1]
		if len(seasons) < 2 {
			return cur, "", false, nil
		}
		return cur, seasons[len(seasons)-2], true, nil
	}
	return b.PeriodAt(at, p.cfg.Timezone, ""), "", false, nil
}

// Now reads the clock the periods follow: a caller that names several periods of one
// instant (current, previous, next reset) reads it once, so that they agree at midnight.
func (p *Periods) Now() time.Time { return p.now() }

// NextResetAt is when the period of b holding at ends by the clock (false: it does not).
func (p *Periods) NextResetAt(b configs.Board, at time.Time) (time.Time, bool) {
	return b.NextReset(at, p.cfg.Timezone)
}

// periodKeyword reports whether name is one of the words ?period= reads as a relative
// period (Resolve): no season may be named so, or it could never be read.
func periodKeyword(name string) bool { return name == "current" || name == "previous" }

// Resolve reads a ?period= of b: empty or "current" for the current period, "previous"
// for the one before, or a period id. Its errors are errBadPeriod and errUnknownPeriod.
func (p *Periods) Resolve(ctx context.Context, b configs.Board, raw string) (string, error) {
	switch raw {
	case "", "current":
		return p.Current(ctx, b)
	case "previous":
		prev, ok, err := p.Previous(ctx, b)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fmt.Errorf("%w: board %s has no previous period", errUnknownPeriod, b.Key())
		}
		return prev, nil
	}
	if !b.ValidPeriod(raw) {
		return "", fmt.Errorf("%w %q for board %s (%s periods)", errBadPeriod, raw, b.Key(), b.Period)
	}
	if b.Period == configs.PeriodSeason {
		seasons, err := p.seasonsOf(ctx, b.ID, true)
		if err != nil {
			return "", err
		}
		if !slices.Contains(seasons, raw) {
			return "", fmt.Errorf("%w: board %s has no season %q", errUnknownPeriod, b.Key(), raw)
		}
	}
	return raw, nil
}

// InRedis says whether reads of a period are served from Redis (loading it from PostgreSQL
// when Redis lost it or let it expire), and for how long Redis keeps it after a load.
// Periods after the current one, and daily, weekly or season periods older than
// PastPeriodsInRedis, are read from PostgreSQL.
func (p *Periods) InRedis(ctx context.Context, b configs.Board, period string) (time.Duration, bool, error) {
	now := p.now()
	switch b.Period {
	case configs.PeriodDaily, configs.PeriodWeekly:
		cur, _ := p.CurrentAt(ctx, b, now)
		if configs.ComparePeriods(period, cur) > 0 {
			return 0, false, nil
		}
	case configs.PeriodSeason:
		seasons, err := p.seasonsOf(ctx, b.ID, true)
		if err != nil {
			return 0, false, err
		}
		i := slices.Index(seasons, period)
		if i < 0 || i < len(seasons)-1-p.cfg.PastPeriodsInRedis {
			return 0, false, nil
		}
	}
	ttl, keep := p.cfg.RedisLife(b, period, now)
	return ttl, keep, nil
}

// Kept tells whether Redis keeps a period of a board (by id; false for an unknown one).
func (p *Periods) Kept(ctx context.Context, board, period string) (bool, error) {
	b, ok := p.cfg.Board(board)
	if !ok {
		return false, nil
	}
	_, hot, err := p.InRedis(ctx, b, period)
	return hot, err
}

// NotBegun tells whether a period of a daily or weekly board has not begun by this
// process's clock.
func (p *Periods) NotBegun(ctx context.Context, b configs.Board, period string) bool {
	if b.Period != configs.PeriodDaily && b.Period != configs.PeriodWeekly {
		return false
	}
	cur, err := p.CurrentAt(ctx, b, p.now())
	return err == nil && configs.ComparePeriods(period, cur) > 0
}

// StartSeason starts a season of a season board and makes it current here at once.
func (p *Periods) StartSeason(ctx context.Context, b configs.Board, name, actor, reason string) (storage.Season, error) {
	s, err := p.seasons.Start(ctx, b.ID, name, actor, reason)
	if err != nil {
		return s, err
	}
	p.mu.Lock()
	p.known = nil // fetch again on the next use
	p.started++
	p.mu.Unlock()
	return s, nil
}

// NextResetOf tells when a board period ends by the clock, when it is the board's current
// period (the realtime snapshots carry it).
func (p *Periods) NextResetOf(board, period string) (time.Time, bool) {
	b, ok := p.cfg.Board(board)
	if !ok {
		return time.Time{}, false
	}
	now := p.now()
	if cur, err := p.CurrentAt(context.Background(), b, now); err != nil || cur != period {
		return time.Time{}, false
	}
	return p.NextResetAt(b, now)
}

// WatchSeasons wakes the streams of a season board when its current season changes, every
// interval until ctx ends: an admin starting a season through another process wakes this
// one's streams of the board (those following the current season move to the new one),
// where they would have looked only at their next update or heartbeat. (The seasons are
// one query for every board, cached for seasonsMaxAge.)
func WatchSeasons(ctx context.Context, periods *Periods, hub *Hub, interval time.Duration) {
	current := map[string]string{}
	look := func() {
		for _, b := range periods.cfg.Boards {
			if b.Period != configs.PeriodSeason {
				continue
			}
			cur, err := periods.Current(ctx, b)
			if err != nil {
				continue
			}
			if prev, ok := current[b.Key()]; ok && prev != cur {
				hub.Wake(b.Key())
			}
			current[b.Key()] = cur
		}
	}
	look() // the seasons as the process starts: a change in its first interval counts
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			look()
		}
	}
}
