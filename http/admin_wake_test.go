package http

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// memSeasons is a season store in memory.
type memSeasons struct {
	mu  sync.Mutex
	all []storage.Season
}

func (m *memSeasons) All(context.Context) ([]storage.Season, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]storage.Season(nil), m.all...), nil
}

func (m *memSeasons) Start(_ context.Context, board, name, actor, _ string) (storage.Season, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := storage.Season{Board: board, Name: name, StartedAt: time.Now(), StartedBy: actor}
	m.all = append(m.all, s)
	return s, nil
}

// TestSeasonStartMovesThisProcesssStreams: an admin's season start wakes this process's
// streams of the board, which move to the new season at once. Here nothing else wakes
// them: the heartbeat is an hour and no season watcher runs (in the service it wakes
// every process's streams within a second or two). Without the wake the stream stayed
// in the old season until something else woke it.
func TestSeasonStartMovesThisProcesssStreams(t *testing.T) {
	cfg, err := configs.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	boards := periodTops{tops: map[string]storage.Top{configs.FirstSeason: {Version: 1}, "s2": {Version: 1}}}
	hub := NewHub(HubConfig{Window: time.Millisecond}, boards, nil)
	defer hub.Close()
	var looks atomic.Int64 // a stream's pass reads the periods' clock once
	now := func() time.Time { looks.Add(1); return time.Now() }
	s := &server{Deps: Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Periods: NewPeriods(cfg, &memSeasons{}, now), Hub: hub,
		Realtime: RealtimeConfig{Heartbeat: time.Hour}}}
	s.Realtime.setDefaults()
	s.tokens = tokens{secret: []byte(cfg.JWTSecret), maxTTL: cfg.JWTMaxTTL, now: time.Now}

	next := snapshots(t, openStream(t, s, "season"))
	if snap := next("on connect"); snap.Period != configs.FirstSeason {
		t.Fatalf("snapshot on connect of season %q, want %q", snap.Period, configs.FirstSeason)
	}
	// The subscription's own wake can leave the stream one more pass to run; the season
	// starts once the stream waits (no look at the clock for 200 ms), so only a wake of
	// the start's can move it.
	for last, quiet, deadline := looks.Load(), time.Now(), time.Now().Add(10*time.Second); time.Since(quiet) < 200*time.Millisecond; time.Sleep(20 * time.Millisecond) {
		if n := looks.Load(); n != last {
			last, quiet = n, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream kept reading the clock for 10 s")
		}
	}
	if w := adminRequest(s.handleStartSeason(), "season", `{"season": "s2"}`); w.Code != http.StatusCreated {
		t.Fatalf("start a season: %d %s", w.Code, w.Body)
	}
	if snap := next("after the season s2 started"); snap.Period != "s2" {
		t.Fatalf("after the season s2 started the stream sent a snapshot of season %q", snap.Period)
	}
}

// swapTops is a board whose top the test swaps (as a rebuild swaps Redis's).
type swapTops struct {
	fakeBoards
	mu  sync.Mutex
	top storage.Top
}

func (b *swapTops) Top(context.Context, string, string, int) (storage.Top, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.top, nil
}

// swapRebuild is a rebuild that swaps in its board's next top, without a notification.
type swapRebuild struct {
	board *swapTops
	next  storage.Top
}

func (r swapRebuild) Rebuild(_ context.Context, _ string, t storage.Target) (storage.RebuildResult, error) {
	r.board.mu.Lock()
	r.board.top = r.next
	r.board.mu.Unlock()
	return storage.RebuildResult{Board: t.Board, Period: t.Period, Entries: int64(len(r.next.Entries)), Version: r.next.Version}, nil
}

func (swapRebuild) CheckConsistency(context.Context, string, storage.Target, bool, int) (storage.ConsistencyReport, error) {
	return storage.ConsistencyReport{}, nil
}

// TestRebuildPushesThisProcesssStreams: an admin's rebuild swaps the board's top in Redis
// without a notification; the process that ran it pushes the rebuilt top to its streams
// before it answers. Here nothing else would: no refresh round runs (every 5 s in the
// service, which TestRebuildReachesOpenStreams cannot tell apart from the push).
func TestRebuildPushesThisProcesssStreams(t *testing.T) {
	cfg, err := configs.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	board := &swapTops{top: storage.Top{Version: 5, UpdatedAt: at, Entries: []storage.Entry{{Rank: 1, UserID: "ghost", Score: 999}}}}
	hub := NewHub(HubConfig{Window: time.Millisecond}, board, nil)
	defer hub.Close()
	rebuilt := storage.Top{Version: 6, UpdatedAt: at, Entries: []storage.Entry{{Rank: 1, UserID: "alice", Score: 30}}}
	s := &server{Deps: Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Periods: NewPeriods(cfg, noSeasons{}, nil), Hub: hub,
		Maintenance: swapRebuild{board: board, next: rebuilt}, Realtime: RealtimeConfig{Heartbeat: time.Hour}}}
	s.Realtime.setDefaults()
	s.tokens = tokens{secret: []byte(cfg.JWTSecret), maxTTL: cfg.JWTMaxTTL, now: time.Now}

	next := snapshots(t, openStream(t, s, "global"))
	if snap := next("on connect"); snap.version() != 5 {
		t.Fatalf("snapshot on connect: %+v, want version 5", snap)
	}
	if w := adminRequest(s.handleRebuild(), "global", ""); w.Code != http.StatusOK {
		t.Fatalf("rebuild: %d %s", w.Code, w.Body)
	}
	if snap := next("after the rebuild"); snap.version() != 6 || len(snap.Entries) != 1 || snap.Entries[0].UserID != "alice" {
		t.Fatalf("after the rebuild the stream sent %+v, want version 6 with alice first", snap)
	}
}

// streamSnapshot is a leaderboard.updated event as a stream sends it.
type streamSnapshot struct {
	ID      string
	Period  string `json:"period"`
	Entries []struct {
		UserID string `json:"user_id"`
	} `json:"entries"`
}

func (s streamSnapshot) version() int64 { v, _ := strconv.ParseInt(s.ID, 10, 64); return v }

// snapshots reads resp's stream; next returns its next leaderboard.updated event, failing
// the test when none comes within 10 s.
func snapshots(t *testing.T, resp *http.Response) (next func(when string) streamSnapshot) {
	ch := make(chan streamSnapshot, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		var event, id string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				event, id = "", ""
			case strings.HasPrefix(line, "id: "):
				id = line[len("id: "):]
			case strings.HasPrefix(line, "event: "):
				event = line[len("event: "):]
			case strings.HasPrefix(line, "data: ") && event == "leaderboard.updated":
				snap := streamSnapshot{ID: id}
				_ = json.Unmarshal([]byte(line[len("data: "):]), &snap)
				ch <- snap
			}
		}
	}()
	return func(when string) streamSnapshot {
		t.Helper()
		select {
		case snap, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended %s", when)
			}
			return snap
		case <-time.After(10 * time.Second):
			t.Fatalf("no snapshot %s within 10 s", when)
		}
		return streamSnapshot{}
	}
}

// adminRequest serves a POST to an admin handler of board with an admin's claims.
func adminRequest(h http.HandlerFunc, board, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/admin/boards/"+board, strings.NewReader(body))
	rctx := chi.NewRouteContext()
	rctx.URLParams.Add("board_id", board)
	ctx := context.WithValue(req.Context(), chi.RouteCtxKey, rctx)
	req = req.WithContext(context.WithValue(ctx, claimsKey{}, &Claims{Roles: []string{"admin"}}))
	w := httptest.NewRecorder()
	h(w, req)
	return w
}
