package http

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// Streams of periods Redis does not keep (read from PostgreSQL).

// closedBoards is the hub's board reader (Reads): "old" is a closed day read from
// PostgreSQL (version 0), "cur" today's, read from Redis (versioned). pgDown makes the
// PostgreSQL reads fail as storage.Ranks does (ErrUnavailable).
type closedBoards struct {
	fakeBoards
	mu     sync.Mutex
	tops   map[string]storage.Top
	pgDown atomic.Bool
}

func (b *closedBoards) Top(_ context.Context, _, period string, _ int) (storage.Top, error) {
	if period == "old" && b.pgDown.Load() {
		return storage.Top{}, fmt.Errorf("top from postgres: %w: %w", storage.ErrUnavailable, context.DeadlineExceeded)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tops[period], nil
}

func (b *closedBoards) set(period string, t storage.Top) {
	b.mu.Lock()
	b.tops[period] = t
	b.mu.Unlock()
}

// redisOnly is HubConfig.Tops: Redis alone, "cur" only.
type redisOnly struct{ b *closedBoards }

func (r redisOnly) Top(ctx context.Context, board, period string, limit int) (storage.Top, error) {
	if period != "cur" {
		return storage.Top{}, storage.ErrNotLoaded
	}
	return r.b.Top(ctx, board, period, limit)
}

func usersOf(t *testing.T, f Frame) string {
	var v struct {
		Entries []struct {
			UserID string `json:"user_id"`
		}
	}
	if err := json.Unmarshal(f.Data, &v); err != nil {
		t.Fatal(err)
	}
	s := ""
	for _, e := range v.Entries {
		s += e.UserID + " "
	}
	return s
}

// TestRefreshOfRedisPeriodsGoesOnWhilePostgresFailsAClosedOne: a stream follows a closed
// day (read from PostgreSQL by the refresh), another today's (Redis). A rebuild swaps
// today's top in Redis without a notification while PostgreSQL is unavailable. The
// refresh of today's period does not depend on PostgreSQL (a closed period's failure,
// taken for Redis's, stopped the round; found by a review).
func TestRefreshOfRedisPeriodsGoesOnWhilePostgresFailsAClosedOne(t *testing.T) {
	missed := 0
	const rounds = 40
	for range rounds {
		clk := newClock()
		b := &closedBoards{tops: map[string]storage.Top{
			"old": {Entries: []storage.Entry{{Rank: 1, UserID: "a", Score: 1}}},
			"cur": {Version: 10, Entries: []storage.Entry{{Rank: 1, UserID: "x", Score: 1}}},
		}}
		h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now, Tops: redisOnly{b},
			Kept: func(_ context.Context, _, period string) (bool, error) { return period != "old", nil }}, b, nil)
		old, err := h.Subscribe(context.Background(), "u1", "daily", "old", -1)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := h.Subscribe(context.Background(), "u2", "daily", "cur", -1)
		if err != nil {
			t.Fatal(err)
		}
		mustFrames(old, clk)
		mustFrames(cur, clk)
		b.pgDown.Store(true)
		b.set("cur", storage.Top{Version: 20, Entries: []storage.Entry{{Rank: 1, UserID: "rebuilt", Score: 2}}})
		_ = h.RefreshAll(context.Background())
		got := false
		for _, f := range mustFrames(cur, clk) {
			if f.Event == "leaderboard.updated" && f.ID == "20" {
				got = true
			}
		}
		if !got {
			missed++
		}
		old.Close(false)
		cur.Close(false)
	}
	if missed > 0 {
		t.Errorf("PostgreSQL unavailable for the closed day's read: today's stream (Redis) missed the rebuilt top in %d of %d refresh rounds", missed, rounds)
	}
}

// TestReconnectToAClosedPeriodGetsItsState: client B watched a day while Redis kept it
// (Last-Event-ID 500, cheater shown). The day closes, an admin bans the cheater, and a
// stream A of the same day on this process gets the post-ban top (the refresh). B
// reconnects with Last-Event-ID 500 and gets the day as PostgreSQL holds it: the snapshot
// on connect is the closed period's (it was refused as older than 500, and with A open
// the refresh published nothing new: B showed the cheater for good; found by a review).
func TestReconnectToAClosedPeriodGetsItsState(t *testing.T) {
	for _, withOther := range []bool{false, true} {
		clk := newClock()
		b := &closedBoards{tops: map[string]storage.Top{
			"old": {Entries: []storage.Entry{{Rank: 1, UserID: "cheater", Score: 9}, {Rank: 2, UserID: "honest", Score: 5}}},
		}}
		h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now,
			Kept: func(_ context.Context, _, period string) (bool, error) { return period != "old", nil }}, b, nil)
		if withOther {
			a, err := h.Subscribe(context.Background(), "a", "daily", "old", -1)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(false)
			mustFrames(a, clk)
			_ = h.RefreshAll(context.Background())
		}
		b.set("old", storage.Top{Entries: []storage.Entry{{Rank: 1, UserID: "honest", Score: 5}}}) // the ban
		_ = h.RefreshAll(context.Background())
		sub, err := h.Subscribe(context.Background(), "b", "daily", "old", 500)
		if err != nil {
			t.Fatal(err)
		}
		frames := mustFrames(sub, clk)
		_ = h.RefreshAll(context.Background())
		_ = h.RefreshAll(context.Background())
		frames = append(frames, mustFrames(sub, clk)...)
		shown := "cheater honest (what it had)"
		for _, f := range frames {
			if f.Event == "leaderboard.updated" {
				shown = usersOf(t, f)
			}
		}
		if shown != "honest " {
			t.Errorf("another stream of the day open: %v; B reconnected with Last-Event-ID 500 after the ban shows %s", withOther, shown)
		}
		sub.Close(false)
	}
}

// countingClosed counts the tops read per period; every period is a closed one.
type countingClosed struct {
	fakeBoards
	mu    sync.Mutex
	reads map[string]int
}

func (b *countingClosed) Top(_ context.Context, _, period string, _ int) (storage.Top, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads[period]++
	return storage.Top{Entries: []storage.Entry{{Rank: 1, UserID: "u-" + period, Score: 1}}}, nil
}

// TestClosedPeriodsTakeTurnsInTheRefresh: streams follow 25 past days (any token holder
// can open some); a refresh round reads at most closedPerRound of them from PostgreSQL,
// taking turns, so every one is read within two rounds.
func TestClosedPeriodsTakeTurnsInTheRefresh(t *testing.T) {
	clk := newClock()
	b := &countingClosed{reads: map[string]int{}}
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now, MaxStreamsPerUser: 100,
		Kept: func(context.Context, string, string) (bool, error) { return false, nil }}, b, nil)
	for i := range 25 {
		sub, err := h.Subscribe(context.Background(), "u", "daily", fmt.Sprintf("2026-01-%02d", i+1), -1)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close(false)
	}
	reads := func() (total int, periods map[string]int) {
		b.mu.Lock()
		defer b.mu.Unlock()
		periods = map[string]int{}
		for p, n := range b.reads {
			total += n
			periods[p] = n
		}
		return total, periods
	}
	before, _ := reads()
	_ = h.RefreshAll(context.Background())
	if n, _ := reads(); n-before != closedPerRound {
		t.Errorf("one round read %d closed tops, want %d", n-before, closedPerRound)
	}
	_ = h.RefreshAll(context.Background())
	if _, periods := reads(); len(periods) != 25 {
		t.Fatalf("read %d periods", len(periods))
	} else {
		for p, n := range periods {
			if n < 2 { // its snapshot on connect, and at least one refresh
				t.Errorf("%s not refreshed in two rounds", p)
			}
		}
	}
}
