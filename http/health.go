package http

import (
	"context"
	"net/http"
	"time"
)

func (s *server) handleHealthz() http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		encode(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

func (s *server) handleReadyz() http.HandlerFunc {
	type response struct {
		Status  string   `json:"status"`
		Failing []string `json:"failing,omitempty"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if failing := s.Ready(ctx); len(failing) > 0 {
			encode(w, http.StatusServiceUnavailable, response{Status: "not_ready", Failing: failing})
			return
		}
		encode(w, http.StatusOK, response{Status: "ready"})
	}
}
