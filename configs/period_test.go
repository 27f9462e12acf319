package configs_test

import (
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
)

var (
	daily  = configs.Board{ID: "d", Operator: configs.OpIncr, Period: configs.PeriodDaily}
	weekly = configs.Board{ID: "w", Operator: configs.OpBest, Period: configs.PeriodWeekly}
	season = configs.Board{ID: "s", Operator: configs.OpIncr, Period: configs.PeriodSeason}
	ever   = configs.Board{ID: "g", Operator: configs.OpBest, Period: configs.PeriodAllTime}
	match  = configs.Board{ID: "match", Operator: configs.OpIncr, Period: configs.PeriodMatch, Match: "m1"}
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestPeriodAt: the period of an instant is its local date (or ISO week) in the zone, across
// daylight-saving changes, half-hour offsets and the day line.
func TestPeriodAt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		zone        string
		at          string // UTC
		day, week   string
		description string
	}{
		{"UTC", "2026-03-08T23:59:59.9Z", "2026-03-08", "2026-W10", "last instant of a day"},
		{"UTC", "2026-03-09T00:00:00Z", "2026-03-09", "2026-W11", "midnight starts the day and (Monday) the week"},
		// New York: DST starts 2026-03-08 02:00 EST (07:00Z), ends 2026-11-01 02:00 EDT (06:00Z).
		{"America/New_York", "2026-03-08T04:59:59Z", "2026-03-07", "2026-W10", "23:59:59 EST the day before the spring change"},
		{"America/New_York", "2026-03-08T05:00:00Z", "2026-03-08", "2026-W10", "midnight EST, the 23-hour day begins"},
		{"America/New_York", "2026-03-09T03:59:59Z", "2026-03-08", "2026-W10", "23:59:59 EDT: the 23-hour day's end"},
		{"America/New_York", "2026-03-09T04:00:00Z", "2026-03-09", "2026-W11", "midnight EDT"},
		{"America/New_York", "2026-11-01T03:59:59Z", "2026-10-31", "2026-W44", "23:59:59 EDT before the autumn change"},
		{"America/New_York", "2026-11-01T04:00:00Z", "2026-11-01", "2026-W44", "midnight EDT, the 25-hour day begins"},
		{"America/New_York", "2026-11-02T04:59:59Z", "2026-11-01", "2026-W44", "23:59:59 EST: the 25-hour day's end"},
		{"America/New_York", "2026-11-02T05:00:00Z", "2026-11-02", "2026-W45", "midnight EST"},
		{"Asia/Kolkata", "2026-06-30T18:29:59Z", "2026-06-30", "2026-W27", "23:59:59 IST (UTC+5:30)"},
		{"Asia/Kolkata", "2026-06-30T18:30:00Z", "2026-07-01", "2026-W27", "midnight IST"},
		{"Pacific/Kiritimati", "2026-01-04T09:59:59Z", "2026-01-04", "2026-W01", "23:59:59 at UTC+14, a Sunday"},
		{"Pacific/Kiritimati", "2026-01-04T10:00:00Z", "2026-01-05", "2026-W02", "midnight at UTC+14, while UTC is still the 4th"},
		// ISO weeks at year ends: 2026-12-31 is a Thursday of week 53; 2027-01-01 too.
		{"UTC", "2026-12-31T12:00:00Z", "2026-12-31", "2026-W53", "a year with 53 weeks"},
		{"UTC", "2027-01-03T12:00:00Z", "2027-01-03", "2026-W53", "early January in the last week of the year before"},
		{"UTC", "2027-01-04T00:00:00Z", "2027-01-04", "2027-W01", "week 1 starts on the Monday of January 4th"},
		{"UTC", "2024-12-30T00:00:00Z", "2024-12-30", "2025-W01", "late December in week 1 of the year after"},
	}
	for _, tt := range tests {
		t.Run(tt.zone+" "+tt.description, func(t *testing.T) {
			t.Parallel()
			loc := zone(t, tt.zone)
			at := utc(tt.at)
			if got := daily.PeriodAt(at, loc, ""); got != tt.day {
				t.Errorf("daily period of %s = %s, want %s", tt.at, got, tt.day)
			}
			if got := weekly.PeriodAt(at, loc, ""); got != tt.week {
				t.Errorf("weekly period of %s = %s, want %s", tt.at, got, tt.week)
			}
		})
	}
	if got := season.PeriodAt(time.Now(), time.UTC, "S7"); got != "S7" {
		t.Errorf("season period = %s, want the current season", got)
	}
	for _, b := range []configs.Board{ever, match} {
		if got := b.PeriodAt(time.Now(), time.UTC, "S7"); got != "all_time" {
			t.Errorf("%s period = %s, want all_time", b.ID, got)
		}
	}
}

// TestPeriodStartsAndResets: local midnight (Monday's for weeks) across DST changes, and
// where midnight itself is skipped.
func TestPeriodStartsAndResets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		board  configs.Board
		zone   string
		at     string
		reset  string // UTC
		length time.Duration
	}{
		{daily, "UTC", "2026-03-08T12:00:00Z", "2026-03-09T00:00:00Z", 24 * time.Hour},
		{daily, "America/New_York", "2026-03-08T12:00:00Z", "2026-03-09T04:00:00Z", 23 * time.Hour},
		{daily, "America/New_York", "2026-11-01T12:00:00Z", "2026-11-02T05:00:00Z", 25 * time.Hour},
		{daily, "Asia/Kolkata", "2026-06-30T18:29:59Z", "2026-06-30T18:30:00Z", 24 * time.Hour},
		{daily, "Pacific/Kiritimati", "2026-01-04T09:00:00Z", "2026-01-04T10:00:00Z", 24 * time.Hour},
		// Santiago moves its clocks at midnight: on 2026-09-06, 00:00 becomes 01:00, so that
		// day begins at 01:00 local (04:00Z) and lasts 23 hours.
		{daily, "America/Santiago", "2026-09-05T12:00:00Z", "2026-09-06T04:00:00Z", 24 * time.Hour},
		{weekly, "UTC", "2026-03-08T12:00:00Z", "2026-03-09T00:00:00Z", 7 * 24 * time.Hour},
		{weekly, "America/New_York", "2026-03-04T12:00:00Z", "2026-03-09T04:00:00Z", 7*24*time.Hour - time.Hour},
		{weekly, "UTC", "2026-03-09T00:00:00Z", "2026-03-16T00:00:00Z", 7 * 24 * time.Hour},
	}
	for _, tt := range tests {
		loc := zone(t, tt.zone)
		at := utc(tt.at)
		reset, ok := tt.board.NextReset(at, loc)
		if !ok || !reset.Equal(utc(tt.reset)) {
			t.Errorf("%s %s: next reset after %s = %s, want %s", tt.board.Period, tt.zone, tt.at, reset.UTC().Format(time.RFC3339), tt.reset)
			continue
		}
		current := tt.board.PeriodAt(at, loc, "")
		start, _ := tt.board.PeriodStart(current, loc)
		if got := reset.Sub(start); got != tt.length {
			t.Errorf("%s %s: period %s lasts %v, want %v", tt.board.Period, tt.zone, current, got, tt.length)
		}
		// The instant before the reset is in the period, the reset itself in the next one.
		if p := tt.board.PeriodAt(reset.Add(-time.Nanosecond), loc, ""); p != current {
			t.Errorf("%s %s: just before the reset is %s, want %s", tt.board.Period, tt.zone, p, current)
		}
		next, _ := tt.board.ShiftPeriod(current, 1)
		if p := tt.board.PeriodAt(reset, loc, ""); p != next {
			t.Errorf("%s %s: the reset instant is in %s, want %s", tt.board.Period, tt.zone, p, next)
		}
	}
	for _, b := range []configs.Board{ever, season, match} {
		if _, ok := b.NextReset(time.Now(), time.UTC); ok {
			t.Errorf("%s boards do not reset by the clock", b.Period)
		}
	}
}

func TestValidPeriodAndShift(t *testing.T) {
	t.Parallel()
	valid := map[configs.Board][]string{
		daily:  {"2026-02-28", "2024-02-29", "2026-12-31"},
		weekly: {"2026-W01", "2026-W53", "2027-W52"},
		season: {"1", "S2", "2026-spring", "a.b_c-d"},
		ever:   {"all_time"},
		match:  {"all_time"},
	}
	invalid := map[configs.Board][]string{
		daily:  {"2026-02-30", "2026-02-29", "2026-13-01", "2026-1-01", "20260101", "", "all_time", "2026-01-01 ", "2026-01-01\x00"},
		weekly: {"2027-W53", "2026-W00", "2026-W+1", "+026-W05", "0000-W01", "2026-W54", "2026-W1", "2026W01", "2026-w01", ""},
		season: {"", "a b", "s/1", "x\x00", "123456789012345678901234567890123"},
		ever:   {"", "2026-01-01", "All_time"},
		match:  {"", "m1"},
	}
	for b, ps := range valid {
		for _, p := range ps {
			if !b.ValidPeriod(p) {
				t.Errorf("%s: %q refused", b.Period, p)
			}
		}
	}
	for b, ps := range invalid {
		for _, p := range ps {
			if b.ValidPeriod(p) {
				t.Errorf("%s: %q accepted", b.Period, p)
			}
		}
	}
	for _, c := range []struct {
		board   configs.Board
		p       string
		n       int
		want    string
		wantsOK bool
	}{
		{daily, "2026-03-01", -1, "2026-02-28", true},
		{daily, "2024-03-01", -1, "2024-02-29", true},
		{daily, "2026-12-31", 1, "2027-01-01", true},
		{weekly, "2027-W01", -1, "2026-W53", true},
		{weekly, "2026-W53", 1, "2027-W01", true},
		{weekly, "2026-W10", -2, "2026-W08", true},
		{season, "S2", -1, "", false},
	} {
		got, ok := c.board.ShiftPeriod(c.p, c.n)
		if got != c.want || ok != c.wantsOK {
			t.Errorf("%s ShiftPeriod(%s, %d) = %q, %v; want %q, %v", c.board.Period, c.p, c.n, got, ok, c.want, c.wantsOK)
		}
	}
}

// TestPeriodStartAfterASkippedDate: Samoa (Pacific/Apia) skipped 2011-12-30: local
// time went from 2011-12-29T23:59:59-10:00 to 2011-12-31T00:00:00+14:00. The day
// 2011-12-31 starts at its local midnight (2011-12-30T10:00:00Z); events accepted from then
// on count for it (PeriodAt), so its start cannot be 12 hours later: dayStart's lower bound
// (noon of the skipped day) was normalized by time.Date to noon of the 31st, already past
// the day's start, and the search never ran (found by a review).
func TestPeriodStartAfterASkippedDate(t *testing.T) {
	t.Parallel()
	apia := zone(t, "Pacific/Apia")
	midnight := utc("2011-12-30T10:00:00Z") // 2011-12-31T00:00:00+14:00
	if got := daily.PeriodAt(midnight, apia, ""); got != "2011-12-31" {
		t.Fatalf("PeriodAt(%s) = %s", midnight, got)
	}
	if got := daily.PeriodAt(midnight.Add(-time.Second), apia, ""); got != "2011-12-29" {
		t.Fatalf("PeriodAt(%s) = %s", midnight.Add(-time.Second), got)
	}
	for _, p := range []string{"2011-12-31", "2011-12-30"} { // the skipped date starts where the next one does
		start, ok := daily.PeriodStart(p, apia)
		if !ok || !start.Equal(midnight) {
			t.Errorf("PeriodStart(%s, Pacific/Apia) = %s (%s), want %s", p, start.UTC().Format(time.RFC3339),
				start.In(apia).Format(time.RFC3339), midnight.Format(time.RFC3339))
		}
	}
	// With one past period kept, Redis keeps 2011-12-29 until 2011-12-31 starts (plus an hour of grace).
	c := configs.Config{Timezone: apia, PastPeriodsInRedis: 1}
	ttl, _ := c.RedisLife(daily, "2011-12-29", midnight.Add(-time.Hour)) // ends at the start of 2011-12-31, plus 1h grace
	if want := 2 * time.Hour; ttl != want {
		t.Errorf("RedisLife(2011-12-29) at 23:00 local = %s, want %s", ttl, want)
	}
}
