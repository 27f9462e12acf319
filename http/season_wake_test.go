package http

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
	s := &server{Deps: Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Periods: NewPeriods(cfg, &memSeasons{}, nil), Hub: hub,
		Realtime: RealtimeConfig{Heartbeat: time.Hour}}}
	s.Realtime.setDefaults()
	s.tokens = tokens{secret: []byte(cfg.JWTSecret), maxTTL: cfg.JWTMaxTTL, now: time.Now}

	periods := make(chan string, 16) // the period of each snapshot the stream sends
	resp := openStream(t, s, "season")
	go func() {
		sc := bufio.NewScanner(resp.Body)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = line[len("event: "):]
			case strings.HasPrefix(line, "data: ") && event == "leaderboard.updated":
				var snap struct{ Period string }
				_ = json.Unmarshal([]byte(line[len("data: "):]), &snap)
				periods <- snap.Period
			}
		}
		close(periods)
	}()
	next := func(when string) string {
		t.Helper()
		select {
		case p, ok := <-periods:
			if !ok {
				t.Fatalf("the stream ended %s", when)
			}
			return p
		case <-time.After(10 * time.Second):
			t.Fatalf("no snapshot %s within 10 s", when)
		}
		return ""
	}
	if p := next("on connect"); p != configs.FirstSeason {
		t.Fatalf("snapshot on connect of season %q, want %q", p, configs.FirstSeason)
	}

	req := httptest.NewRequest(http.MethodPost, "/admin/boards/season/seasons", strings.NewReader(`{"season": "s2"}`))
	rctx := chi.NewRouteContext()
	rctx.URLParams.Add("board_id", "season")
	ctx := context.WithValue(req.Context(), chi.RouteCtxKey, rctx)
	req = req.WithContext(context.WithValue(ctx, claimsKey{}, &Claims{Roles: []string{"admin"}}))
	w := httptest.NewRecorder()
	s.handleStartSeason()(w, req)
	if w.Code != http.StatusCreated {
		t.Fatalf("start a season: %d %s", w.Code, w.Body)
	}
	if p := next("after the season s2 started"); p != "s2" {
		t.Fatalf("after the season s2 started the stream sent a snapshot of season %q", p)
	}
}
