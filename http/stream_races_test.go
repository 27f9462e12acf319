package http

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// inFlightUser is a BoardReader whose User read, once armed, reads the entry as it is
// (the score held now) and delivers the answer only when released: a Redis reply on its
// way back while the entry changes and the change is told.
type inFlightUser struct {
	periodTops
	mu       sync.Mutex
	score    int64
	armed    bool
	blocked  chan struct{}
	released chan struct{}
}

func (g *inFlightUser) User(_ context.Context, _, _, _ string) (storage.Entry, error) {
	g.mu.Lock()
	e := storage.Entry{UserID: "u", Rank: 1, Score: g.score, Version: g.score} // each score a newer version
	block := g.armed
	g.armed = false
	g.mu.Unlock()
	if block {
		close(g.blocked)
		<-g.released
	}
	return e, nil
}

func (g *inFlightUser) set(score int64) { g.mu.Lock(); g.score = score; g.mu.Unlock() }

// userScores are the scores of the user.rank.updated frames, in order.
func userScores(frames []Frame) []int64 { return userField(frames, "score") }

// userRanks are the ranks of the user.rank.updated frames.
func userRanks(frames []Frame) []int64 { return userField(frames, "rank") }

// userField is one integer field of each user.rank.updated frame.
func userField(frames []Frame, field string) []int64 {
	var out []int64
	for _, f := range frames {
		if f.Event != "user.rank.updated" {
			continue
		}
		var v map[string]any
		_ = json.Unmarshal(f.Data, &v)
		n, _ := v[field].(float64)
		out = append(out, int64(n))
	}
	return out
}

// TestOwnEntryOnConnectNeverFollowsANewerRank: a stream of user u opens (Subscribe, and
// Move at a reset, queue u's own entry, read after the client is registered). Its read
// finds u at 10 points; before its answer is queued, u's score goes to 20 and the change is
// told to u's streams (UsersChanged reads 20 and queues it). The connect read's older
// entry (a lower version) is not queued after it: the stream's last user.rank.updated,
// what the client shows as u's score and rank, is u's entry now. (It was the older one,
// until u's next change: found by a review.)
func TestOwnEntryOnConnectNeverFollowsANewerRank(t *testing.T) {
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	for _, name := range []string{"subscribe", "move"} {
		t.Run(name, func(t *testing.T) {
			boards := &inFlightUser{periodTops: periodTops{tops: map[string]storage.Top{
				"2026-01-01": {Version: 50, UpdatedAt: at}, "2026-01-02": {Version: 60, UpdatedAt: at},
			}}, score: 10}
			clk := newClock()
			h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, boards, nil)
			ctx := context.Background()
			period := "2026-01-02"
			if name == "move" {
				period = "2026-01-01"
			}
			var sub *Subscription
			if name == "move" {
				var err error
				if sub, err = h.Subscribe(ctx, "u", "daily", period, -1); err != nil {
					t.Fatal(err)
				}
				sub.Frames()
			}
			boards.mu.Lock()
			boards.armed, boards.blocked, boards.released = true, make(chan struct{}), make(chan struct{})
			blocked, released := boards.blocked, boards.released
			boards.mu.Unlock()
			done := make(chan error, 1)
			go func() {
				if name == "move" {
					done <- sub.Move(ctx, "2026-01-02")
					return
				}
				var err error
				sub, err = h.Subscribe(ctx, "u", "daily", "2026-01-02", -1)
				done <- err
			}()
			<-blocked                                                 // the connect read found 10; its answer is on its way
			boards.set(20)                                            // u scores 20
			h.UsersChanged(ctx, "daily", "2026-01-02", []string{"u"}) // and her streams are told
			close(released)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			defer sub.Close(false)
			clk.advance(time.Second)
			frames, _ := sub.Frames()
			got := userScores(frames)
			if len(got) == 0 || got[len(got)-1] != 20 {
				t.Errorf("user.rank.updated scores in order: %v; the last one (what the client shows) is not u's score now, 20", got)
			}
		})
	}
}

// resetBoards is the board reader of the daily board across a reset: the new day's first
// top read fails once (its load from PostgreSQL is cut), then answers.
type resetBoards struct {
	periodTops
	mu       sync.Mutex
	failOnce string
}

func (r *resetBoards) Top(ctx context.Context, board, period string, limit int) (storage.Top, error) {
	r.mu.Lock()
	fail := period == r.failOnce
	if fail {
		r.failOnce = ""
	}
	r.mu.Unlock()
	if fail {
		return storage.Top{}, errors.New("load daily 2026-01-02 from postgres: connection reset by peer")
	}
	return r.periodTops.Top(ctx, board, period, limit)
}

// notLoaded is the refresh's Redis-only reader: the new day was never loaded (its load
// failed), the old one is there.
type notLoaded struct{ periodTops }

func (n notLoaded) Top(ctx context.Context, board, period string, limit int) (storage.Top, error) {
	if period == "2026-01-02" {
		return storage.Top{}, storage.ErrNotLoaded
	}
	return n.periodTops.Top(ctx, board, period, limit)
}

// TestStreamMovesToTheNewDayAfterAFailedRead: a stream of the daily board's current
// period reaches midnight; its move reads the new day's snapshot, and that read fails once
// (the load of the new day from PostgreSQL is cut). The stream reads it again after
// MoveRetry and shows the new day. (Move had already switched the subscription to the new
// day, so the stream never tried again: every later wake, heartbeats here every 50 ms and
// the periodic refresh, found the period unchanged, and the stream kept showing yesterday's
// top until the new day's top first changed: found by a review.)
func TestStreamMovesToTheNewDayAfterAFailedRead(t *testing.T) {
	cfg, err := configs.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	b, _ := cfg.Board("daily")
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tops := periodTops{tops: map[string]storage.Top{
		"2026-01-01": {Version: 50, UpdatedAt: at, Entries: []storage.Entry{{Rank: 1, UserID: "old", Score: 500, UpdatedAt: at}}},
		"2026-01-02": {Version: 60, UpdatedAt: at},
	}}
	boards := &resetBoards{periodTops: tops}
	clk := &gateClock{t: time.Date(2026, 1, 1, 23, 59, 59, 0, cfg.Timezone)}
	periods := NewPeriods(cfg, noSeasons{}, clk.now)
	hub := NewHub(HubConfig{Window: time.Millisecond, Tops: notLoaded{tops}}, boards, nil)
	s := &server{Deps: Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Periods: periods, Hub: hub,
		Realtime: RealtimeConfig{Heartbeat: 50 * time.Millisecond, MoveRetry: 100 * time.Millisecond}}}
	s.Realtime.setDefaults()
	s.tokens = tokens{secret: []byte(cfg.JWTSecret), maxTTL: cfg.JWTMaxTTL, now: time.Now}
	defer hub.Close()
	resp := openStream(t, s, b.Key())
	var mu sync.Mutex
	var periodsSeen []string
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var v struct {
					Period  string `json:"period"`
					Version *int64 `json:"version"`
				}
				if json.Unmarshal([]byte(data), &v) == nil && v.Version != nil {
					mu.Lock()
					periodsSeen = append(periodsSeen, v.Period)
					mu.Unlock()
				}
			}
		}
	}()
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(periodsSeen) == 0 {
			return ""
		}
		return periodsSeen[len(periodsSeen)-1]
	}
	waitFor := func(d time.Duration, want string) bool {
		for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if last() == want {
				return true
			}
		}
		return false
	}
	if !waitFor(5*time.Second, "2026-01-01") {
		t.Fatalf("snapshot on connect: %v", periodsSeen)
	}
	boards.mu.Lock()
	boards.failOnce = "2026-01-02"
	boards.mu.Unlock()
	clk.advance(2 * time.Second) // 00:00:01 on 2026-01-02
	time.Sleep(300 * time.Millisecond)
	if err := hub.RefreshAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !waitFor(5*time.Second, "2026-01-02") {
		mu.Lock()
		defer mu.Unlock()
		t.Errorf("5 s after midnight (one failed read of the new day, every read fine since, a heartbeat every 50 ms, a refresh round) the stream's snapshots are of %v: it still shows 2026-01-01", periodsSeen)
	}
}
