package configs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Period kinds: how a board's entries are grouped in time.
const (
	PeriodAllTime = "all_time" // one period, forever
	PeriodDaily   = "daily"    // YYYY-MM-DD, the local date
	PeriodWeekly  = "weekly"   // YYYY-Www, the ISO week of the local date (weeks start on Monday)
	PeriodSeason  = "season"   // the name an admin gave it; "1" until an admin starts another
	PeriodMatch   = "match"    // one board per match id (match:{id}), all_time within it
)

// FirstSeason is the season of a season board until an admin starts another.
const FirstSeason = "1"

// ErrBadPeriod is the error of a period id that cannot name a period of the board.
var ErrBadPeriod = errors.New("invalid period")

// PeriodAt is the period an event accepted at t counts for, with loc the time zone of
// daily and weekly boards and season the board's current season.
func (b Board) PeriodAt(t time.Time, loc *time.Location, season string) string {
	switch b.Period {
	case PeriodDaily:
		return t.In(loc).Format(time.DateOnly)
	case PeriodWeekly:
		y, w := t.In(loc).ISOWeek()
		return fmt.Sprintf("%04d-W%02d", y, w)
	case PeriodSeason:
		return season
	}
	return PeriodAllTime
}

// ValidPeriod reports whether p can name a period of the board: a real date for daily
// boards (2026-02-30 is not), an existing ISO week for weekly ones, a season name of 1–32
// of [A-Za-z0-9_.-] for season boards, "all_time" for the others.
func (b Board) ValidPeriod(p string) bool {
	switch b.Period {
	case PeriodDaily:
		_, err := parseDay(p)
		return err == nil
	case PeriodWeekly:
		_, err := parseWeek(p)
		return err == nil
	case PeriodSeason:
		return ValidSeason(p)
	}
	return p == PeriodAllTime
}

// ValidSeason reports whether s can name a season: 1–32 of [A-Za-z0-9_.-].
func ValidSeason(s string) bool {
	if len(s) == 0 || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// PeriodStart is the first instant of a daily or weekly period in loc (local midnight,
// Monday for weeks). ok is false for the other kinds, which have no start.
func (b Board) PeriodStart(p string, loc *time.Location) (time.Time, bool) {
	switch b.Period {
	case PeriodDaily:
		d, err := parseDay(p)
		if err != nil {
			return time.Time{}, false
		}
		return dayStart(d.Year(), d.Month(), d.Day(), loc), true
	case PeriodWeekly:
		monday, err := parseWeek(p)
		if err != nil {
			return time.Time{}, false
		}
		return dayStart(monday.Year(), monday.Month(), monday.Day(), loc), true
	}
	return time.Time{}, false
}

// NextReset is when the period current at t ends: the next local midnight for daily
// boards, the next Monday's for weekly ones. ok is false for boards that do not roll over
// by the clock.
func (b Board) NextReset(t time.Time, loc *time.Location) (time.Time, bool) {
	local := t.In(loc)
	switch b.Period {
	case PeriodDaily:
		return dayStart(local.Year(), local.Month(), local.Day()+1, loc), true
	case PeriodWeekly:
		days := (8 - int(local.Weekday())) % 7 // to the next Monday
		if days == 0 {
			days = 7
		}
		return dayStart(local.Year(), local.Month(), local.Day()+days, loc), true
	}
	return time.Time{}, false
}

// ShiftPeriod returns the daily or weekly period n periods after p (n < 0: before it).
func (b Board) ShiftPeriod(p string, n int) (string, bool) {
	switch b.Period {
	case PeriodDaily:
		d, err := parseDay(p)
		if err != nil {
			return "", false
		}
		return d.AddDate(0, 0, n).Format(time.DateOnly), true
	case PeriodWeekly:
		monday, err := parseWeek(p)
		if err != nil {
			return "", false
		}
		y, w := monday.AddDate(0, 0, 7*n).ISOWeek()
		return fmt.Sprintf("%04d-W%02d", y, w), true
	}
	return "", false
}

// ComparePeriods orders two valid daily or weekly periods: -1, 0 or 1. Their ids sort as
// text in time order.
func ComparePeriods(a, c string) int { return strings.Compare(a, c) }

// dayStart is the first instant of a local date in loc: midnight, or where a
// daylight-saving change skips midnight (or the whole date), the first instant whose local
// date is that date or later. It searches between noon of the day before and noon of the
// day, to the second.
func dayStart(y int, m time.Month, d int, loc *time.Location) time.Time {
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Format(time.DateOnly) // normalized
	reached := func(t time.Time) bool { return t.In(loc).Format(time.DateOnly) >= want }
	lo, hi := time.Date(y, m, d-1, 12, 0, 0, 0, loc), time.Date(y, m, d, 12, 0, 0, 0, loc)
	for reached(lo) { // the day before was skipped (time.Date moved its noon onto the date)
		lo = lo.Add(-6 * time.Hour)
	}
	for !reached(hi) { // a zone whose noon is still yesterday: look later
		hi = hi.Add(6 * time.Hour)
	}
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
		if reached(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// parseDay reads YYYY-MM-DD; dates that do not exist (2026-02-30) are refused.
func parseDay(p string) (time.Time, error) {
	d, err := time.Parse(time.DateOnly, p)
	if err != nil || d.Format(time.DateOnly) != p {
		return time.Time{}, fmt.Errorf("%w: want a date YYYY-MM-DD, got %q", ErrBadPeriod, p)
	}
	return d, nil
}

// parseWeek reads YYYY-Www (ISO 8601) and returns the week's Monday (UTC date).
func parseWeek(p string) (time.Time, error) {
	bad := fmt.Errorf("%w: want an ISO week YYYY-Www, got %q", ErrBadPeriod, p)
	if len(p) != 8 || p[4] != '-' || p[5] != 'W' {
		return time.Time{}, bad
	}
	y, err1 := strconv.Atoi(p[:4])
	w, err2 := strconv.Atoi(p[6:])
	if err1 != nil || err2 != nil || y < 1 || w < 1 || w > 53 || fmt.Sprintf("%04d-W%02d", y, w) != p {
		return time.Time{}, bad // Atoi takes a sign: "2026-W+1" would name week 1 otherwise spelled
	}
	// The Monday of week 1 is the Monday of the week holding January 4th.
	jan4 := time.Date(y, time.January, 4, 0, 0, 0, 0, time.UTC)
	monday := jan4.AddDate(0, 0, -((int(jan4.Weekday())+6)%7)+7*(w-1))
	if gy, gw := monday.ISOWeek(); gy != y || gw != w { // week 53 of a 52-week year
		return time.Time{}, bad
	}
	return monday, nil
}

// retentionGrace keeps a daily or weekly period in Redis a little past its last day in
// the window, for events accepted just before a reset and applied after it.
const retentionGrace = time.Hour

// RedisLife says how long Redis keeps a board period after a write at now (0: forever),
// and whether it keeps it at all: a daily or weekly period stays for the rest of its time
// and PastPeriodsInRedis periods after it; season and match boards stay until they have
// been idle for SeasonIdleTTL or MatchIdleTTL (they are reloaded from PostgreSQL on demand).
func (c Config) RedisLife(b Board, period string, now time.Time) (ttl time.Duration, keep bool) {
	switch b.Period {
	case PeriodDaily, PeriodWeekly:
		last, ok := b.ShiftPeriod(period, 1+c.PastPeriodsInRedis)
		if !ok {
			return 0, false
		}
		end, _ := b.PeriodStart(last, c.Timezone)
		ttl = end.Add(retentionGrace).Sub(now)
		return ttl, ttl > 0
	case PeriodSeason:
		return c.SeasonIdleTTL, true
	case PeriodMatch:
		return c.MatchIdleTTL, true
	}
	return 0, true
}
