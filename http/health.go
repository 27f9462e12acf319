package http

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"
)

func (s *server) handleHealthz() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		encode(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

// readyzResponse is /readyz's answer.
type readyzResponse struct {
	Status  string   `json:"status"`
	Failing []string `json:"failing,omitempty"`
}

func (s *server) handleReadyz() http.HandlerFunc {
	type response = readyzResponse
	return func(w http.ResponseWriter, r *http.Request) {
		// The check bounds each part's answer at 2 s itself; this bounds the wait for it.
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if failing := s.Ready(ctx); len(failing) > 0 {
			encode(w, http.StatusServiceUnavailable, response{Status: "not_ready", Failing: failing})
			return
		}
		encode(w, http.StatusOK, response{Status: "ready"})
	}
}

// Front is the process's handler from the moment it listens: while the process starts
// (connects to its stores, migrates, starts its roles), /healthz answers 200 (the process
// lives: a liveness probe must not kill it while it waits out a failover or a long
// migration), /readyz 503 naming "starting", and everything else 503
// dependency_unavailable with Retry-After; once Serve is called, the roles' handler.
type Front struct {
	h atomic.Pointer[http.Handler]
}

// NewFront returns a Front that answers as a starting process.
func NewFront() *Front {
	f := &Front{}
	starting := securityHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probe := r.Method == http.MethodGet || r.Method == http.MethodHead
		switch {
		case probe && r.URL.Path == "/healthz":
			encode(w, http.StatusOK, map[string]string{"status": "ok"})
		case probe && r.URL.Path == "/readyz":
			encode(w, http.StatusServiceUnavailable, readyzResponse{Status: "not_ready", Failing: []string{"starting"}})
		default:
			w.Header().Set("Retry-After", "1")
			writeError(w, r, http.StatusServiceUnavailable, "dependency_unavailable", "the service is starting", "")
		}
	}))
	f.h.Store(&starting)
	return f
}

// Serve hands every later request to h.
func (f *Front) Serve(h http.Handler) { f.h.Store(&h) }

func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*f.h.Load()).ServeHTTP(w, r) }
