package http

import (
	"context"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
)

// TestPrepareReadsTheClockOnce: a write's acceptance time and the periods it counts for
// come from one reading of the clock, so a write at midnight cannot be accepted on one day
// and count for the next (the periods read the clock again).
func TestPrepareReadsTheClockOnce(t *testing.T) {
	cfg, _ := configs.Load(func(string) string { return "" })
	readings := []time.Time{time.Date(2026, 5, 4, 23, 59, 59, 999_000_000, time.UTC)}
	clock := func() time.Time { // each reading a little later: the next one is after midnight
		now := readings[len(readings)-1]
		readings = append(readings, now.Add(time.Millisecond))
		return now
	}
	s := submission{periods: NewPeriods(cfg, nil, clock), now: clock}
	daily, _ := cfg.Board("daily")
	global, _ := cfg.Board("global")
	p, err := s.Prepare(context.Background(), submit{Board: daily, Also: []configs.Board{daily, global}, UserID: "u", EventID: "e", Value: 1})
	if err != nil {
		t.Fatal(err)
	}
	if day := p.at.Format(time.DateOnly); p.period != day || p.also[0].Period != day {
		t.Errorf("accepted at %s, counts for %s and %s", p.at, p.period, p.also[0].Period)
	}
}
