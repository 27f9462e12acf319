// Package http is the service's HTTP API: routes, auth, request decoding and error
// mapping. Handlers only publish commands (through the outbox) and read Redis.
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

// CommandLog makes accepted commands durable (the SQL outbox).
type CommandLog interface {
	Accept(ctx context.Context, cmd storage.Command) (storage.AcceptOutcome, error)
}

// BoardReader answers reads from the Redis mirror.
type BoardReader interface {
	Top(ctx context.Context, board, period string, limit int) (storage.Top, error)
	User(ctx context.Context, board, period, userID string) (storage.Entry, error)
}

// RequestLog looks up a user's accepted event ids (the body hash they were accepted with).
type RequestLog interface {
	LookupRequest(ctx context.Context, userID, eventID string) ([]byte, error)
	IsApplied(ctx context.Context, userID, eventID string) (bool, error)
}

// Deps are what the HTTP API needs.
type Deps struct {
	Config   configs.Config
	Logger   *slog.Logger
	Commands CommandLog
	Boards   BoardReader
	Requests RequestLog
	// Ready returns the names of the parts that are not ready (empty when ready).
	Ready    func(ctx context.Context) []string
	Registry *prometheus.Registry
	// WaitTimeout bounds ?wait=true (default 5 s).
	WaitTimeout time.Duration
	// Fallback answers reads from PostgreSQL when Boards (Redis) is unavailable.
	Fallback BoardReader
	// Maintenance backs the rebuild and consistency endpoints.
	Maintenance BoardMaintenance
	// DeadLetters backs the admin endpoints.
	DeadLetters DeadLetterStore
	// Hub feeds the realtime streams.
	Hub      *Hub
	Realtime RealtimeConfig
}

type server struct {
	Deps
	metrics httpMetrics
	tokens  tokens
}

// NewServer returns the API's handler.
func NewServer(d Deps) http.Handler {
	if d.WaitTimeout <= 0 {
		d.WaitTimeout = 5 * time.Second
	}
	d.Realtime.setDefaults()
	s := &server{Deps: d, metrics: newHTTPMetrics(d.Registry), tokens: newTokens(d.Config)}
	return s.routes()
}

func newTokens(cfg configs.Config) tokens {
	return tokens{secret: []byte(cfg.JWTSecret), maxTTL: cfg.JWTMaxTTL, now: time.Now}
}

// NewOpsServer returns the handler of a process that runs no API role (a relay or a
// projector alone): /healthz, /readyz and /metrics only.
func NewOpsServer(d Deps) http.Handler {
	s := &server{Deps: d, metrics: newHTTPMetrics(d.Registry)}
	r := chi.NewRouter()
	r.Use(s.requestID, s.observe, s.recoverPanics)
	s.opsRoutes(r)
	return r
}
