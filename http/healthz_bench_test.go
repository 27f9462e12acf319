package http

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/openleaderboard/leaderboard/configs"
)

// The bench's bare-HTTP ceiling is GET /healthz of the service: these measure its handler
// time against a bare handler's (`go test -run XXX -bench Healthz ./http/`), the share of
// the ceiling README's Benchmark section names.

func benchHealthz(b *testing.B, h http.Handler) {
	req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	req.Host = "127.0.0.1:8080"
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code, w.Body.String())
		}
	}
}

// BenchmarkHealthzService: /healthz through the service's router and middleware (path
// decoding, request id, security headers, metrics, recover), as the bench reaches it.
func BenchmarkHealthzService(b *testing.B) {
	cfg, err := configs.Load(func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	benchHealthz(b, NewServer(Deps{Config: cfg, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Ready: func(context.Context) []string { return nil }}))
}

// BenchmarkHealthzBare: a bare handler answering the same body.
func BenchmarkHealthzBare(b *testing.B) {
	benchHealthz(b, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "ok"})
	}))
}
