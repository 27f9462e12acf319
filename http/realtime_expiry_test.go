package http

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// movingClock is a clock the test moves, safe to read from the stream's goroutine.
type movingClock struct{ ns atomic.Int64 }

func (c *movingClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *movingClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestStreamEndsWhenItsTokenExpires: a stream opened with a realtime token ends once the
// token has expired by the clock tokens are checked on (with the 30 s of skew a token is
// accepted with), so a token leaked from a URL opens nothing that outlives it; the client
// reconnects with a new token. (A stream lived on for as long as the connection did.)
func TestStreamEndsWhenItsTokenExpires(t *testing.T) {
	cfg, err := configs.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	boards := periodTops{tops: map[string]storage.Top{"all_time": {Version: 1, UpdatedAt: at}}}
	hub := NewHub(HubConfig{Window: time.Millisecond}, boards, nil)
	defer hub.Close()
	clk := &movingClock{}
	clk.ns.Store(time.Now().UnixNano())
	s := &server{Deps: Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Periods: NewPeriods(cfg, noSeasons{}, nil), Hub: hub,
		Realtime: RealtimeConfig{Heartbeat: 50 * time.Millisecond}}}
	s.Realtime.setDefaults()
	s.tokens = tokens{secret: []byte(cfg.JWTSecret), maxTTL: cfg.JWTMaxTTL, now: clk.now}
	resp := openStream(t, s, "global")
	ended := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		close(ended)
	}()
	open := func(when string) {
		t.Helper()
		select {
		case <-ended:
			t.Fatalf("the stream ended %s", when)
		case <-time.After(300 * time.Millisecond):
		}
	}
	open("while its token was valid")
	clk.advance(time.Minute + 29*time.Second) // 29 s past exp: within the skew a token is accepted with
	open("within the clock skew of its token's expiry")
	clk.advance(2 * time.Second)
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream lives on 31 s after its token expired")
	}
}

// openStream serves s's realtime stream, opens it for board with a realtime token s signs
// for "viewer", and checks that it answers 200. The stream closes when the test ends.
func openStream(t *testing.T, s *server, board string) *http.Response {
	t.Helper()
	srv := httptest.NewServer(s.handleRealtimeLeaderboard())
	t.Cleanup(srv.Close)
	tok, _, err := s.tokens.signRealtime("viewer", "", time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"?board="+board+"&token="+tok, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	return resp
}
