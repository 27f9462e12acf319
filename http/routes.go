package http

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func (s *server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(s.requestID, s.observe, s.recoverPanics)

	s.opsRoutes(r)

	r.Get("/", s.handlePage())
	r.Route("/v1", func(r chi.Router) {
		// The stream authenticates itself: browsers pass a realtime token in the URL.
		r.Get("/realtime/leaderboard", s.handleRealtimeLeaderboard())
		r.Group(func(r chi.Router) {
			r.Use(s.authenticate)
			r.Get("/realtime/token", s.handleRealtimeToken())
			r.Post("/scores", s.handleSubmitScore())
			r.Get("/leaderboard/top", s.handleTop())
			r.Get("/leaderboard/users/{user_id}", s.handleUser())
			r.Get("/leaderboard/me", s.handleMe())
		})
	})
	r.Route("/admin", func(r chi.Router) {
		r.Use(s.authenticate, s.requireRole("admin"))
		r.Get("/dlq", s.handleListDeadLetters())
		r.Post("/dlq/requeue", s.handleRequeueMatching())
		r.Get("/dlq/{id}", s.handleGetDeadLetter())
		r.Post("/dlq/{id}/requeue", s.handleRequeueDeadLetter())
		r.Delete("/dlq/{id}", s.handleDeleteDeadLetter())
		r.Post("/boards/{board_id}/rebuild", s.handleRebuild())
		r.Get("/consistency", s.handleConsistency())
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusNotFound, "not_found", "no such endpoint", "")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed on this endpoint", "")
	})
	return r
}

// opsRoutes are the endpoints every process serves, whatever its roles.
func (s *server) opsRoutes(r chi.Router) {
	r.Get("/healthz", s.handleHealthz())
	r.Get("/readyz", s.handleReadyz())
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{}))
}
