package http

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/openleaderboard/leaderboard/storage"
)

// BoardMaintenance rebuilds Redis boards from PostgreSQL and compares the two.
type BoardMaintenance interface {
	Rebuild(ctx context.Context, actor, board, period string) (storage.RebuildResult, error)
	CheckConsistency(ctx context.Context, actor, board, period string, full bool, sample int) (storage.ConsistencyReport, error)
}

func (s *server) handleRebuild() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		board, ok := s.Config.Board(chi.URLParam(r, "board_id"))
		if !ok {
			writeError(w, r, http.StatusNotFound, "not_found", "unknown board", "")
			return
		}
		res, err := s.Maintenance.Rebuild(context.WithoutCancel(r.Context()), claimsFrom(r.Context()).Subject, board.ID, board.Period)
		if errors.Is(err, storage.ErrRebuildRunning) {
			writeError(w, r, http.StatusConflict, "rebuild_in_progress", "a rebuild of this board is already running; retry when it ends", "")
			return
		}
		if err != nil {
			s.readFailed(w, r, err)
			return
		}
		s.Logger.Info("board rebuilt", "board", board.ID, "entries", res.Entries, "version", res.Version,
			"took", res.Duration, "by", claimsFrom(r.Context()).Subject)
		encode(w, http.StatusOK, map[string]any{"board": res.Board, "period": res.Period, "entries": res.Entries,
			"version": res.Version, "took_ms": res.Duration.Milliseconds()})
	}
}

func (s *server) handleConsistency() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		id := q.Get("board")
		if id == "" {
			id = globalBoard
		}
		board, ok := s.Config.Board(id)
		if !ok {
			writeError(w, r, http.StatusNotFound, "not_found", "unknown board", "")
			return
		}
		full := q.Get("mode") == "full"
		if m := q.Get("mode"); m != "" && m != "full" && m != "sample" {
			writeError(w, r, http.StatusBadRequest, "invalid_mode", "mode must be full or sample", "")
			return
		}
		sample := 1000
		if raw := q.Get("sample"); raw != "" {
			n, err := strconv.Atoi(raw)
			if err != nil || n < 1 || n > 100_000 {
				writeError(w, r, http.StatusBadRequest, "invalid_sample", "sample must be from 1 to 100000", "")
				return
			}
			sample = n
		}
		rep, err := s.Maintenance.CheckConsistency(r.Context(), claimsFrom(r.Context()).Subject, board.ID, board.Period, full, sample)
		if err != nil {
			s.readFailed(w, r, err)
			return
		}
		encode(w, http.StatusOK, rep)
	}
}
