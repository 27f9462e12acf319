// Package http is the service's HTTP API: routes, auth, request decoding, the submission
// use case, error mapping, the live page, and the SSE hub. Writes go to the outbox;
// reads come from Redis (PostgreSQL when Redis is down).
package http

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// BoardReader answers reads of board periods, by board key (global, match:m1).
type BoardReader interface {
	Top(ctx context.Context, board, period string, limit int) (storage.Top, error)
	User(ctx context.Context, board, period, userID string) (storage.Entry, error)
	// Users reads several users' entries in one read; those without one are left out.
	Users(ctx context.Context, board, period string, userIDs []string) ([]storage.Entry, error)
}

// Deps are what the HTTP API needs.
type Deps struct {
	Config   configs.Config
	Logger   *slog.Logger
	Commands CommandLog
	Requests RequestLog
	// Periods decides periods; Reads answers reads of any board period (both shared with
	// the hub).
	Periods *Periods
	Reads   *Reads
	// Ready returns the names of the parts that are not ready (empty when ready).
	Ready    func(ctx context.Context) []string
	Registry *prometheus.Registry
	// WaitTimeout bounds ?wait=true (default 5 s).
	WaitTimeout time.Duration
	// Maintenance backs the rebuild and consistency endpoints.
	Maintenance BoardMaintenance
	// DeadLetters backs the admin endpoints.
	DeadLetters DeadLetterStore
	// Hub feeds the realtime streams.
	Hub      *Hub
	Realtime RealtimeConfig
	// Now is the clock of periods (time.Now when nil); tokens are checked on the real clock.
	Now func() time.Time
	// Guard protects writes (bans, rate limits, cooldowns) and records refusals; without
	// one every write is refused.
	Guard *Guard
	// Moderation backs bans, adjustments and removals and the anomaly and audit pages.
	Moderation Moderation
	// Values, when set, reads entries' values in pipelines shared with other requests'
	// commands (the write path's "is it unchanged?"), instead of a round trip per write.
	Values ValueReads
}

type server struct {
	Deps
	metrics     httpMetrics
	tokens      tokens
	cursors     cursors
	submissions submission
	failures    *failLog
	waits       waitSlots
}

// NewServer returns the API's handler.
func NewServer(d Deps) http.Handler {
	if d.WaitTimeout <= 0 {
		d.WaitTimeout = 5 * time.Second
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	d.Realtime.setDefaults()
	s := &server{
		Deps: d, metrics: newHTTPMetrics(d.Registry), failures: newFailLog(d.Logger),
		tokens:      tokens{secret: []byte(d.Config.JWTSecret), maxTTL: d.Config.JWTMaxTTL, audience: d.Config.JWTAudience, now: time.Now, verified: newTokenCache(25_000)},
		cursors:     newCursors(d.Config.JWTSecret),
		submissions: submission{reads: d.Reads, value: d.Values, periods: d.Periods, commands: d.Commands, requests: d.Requests, now: d.Now},
	}
	return s.routes()
}

// NewOpsServer returns the handler of a process that runs no API role (a relay or a
// projector alone): /healthz, /readyz and /metrics only.
func NewOpsServer(d Deps) http.Handler {
	s := &server{Deps: d, metrics: newHTTPMetrics(d.Registry), failures: newFailLog(d.Logger)}
	r := chi.NewRouter()
	r.Use(s.requestID, securityHeaders, s.observe, s.recoverPanics)
	s.opsRoutes(r)
	return r
}
