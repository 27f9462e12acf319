package http

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

type userEntry struct {
	UserID    string    `json:"user_id"`
	Score     int64     `json:"score"`
	Rank      int64     `json:"rank"`
	UpdatedAt time.Time `json:"updated_at"`
}

func (s *server) handleTop() http.HandlerFunc {
	type entry struct {
		Rank      int64     `json:"rank"`
		UserID    string    `json:"user_id"`
		Score     int64     `json:"score"`
		NickName  string    `json:"nick_name,omitempty"`
		UpdatedAt time.Time `json:"updated_at"`
	}
	type response struct {
		Board     string     `json:"board"`
		Version   int64      `json:"version"`
		UpdatedAt *time.Time `json:"updated_at"`
		Entries   []entry    `json:"entries"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		limit := 10
		if raw := r.URL.Query().Get("limit"); raw != "" {
			n, err := strconv.Atoi(raw)
			if err != nil || n < 1 || n > 100 {
				writeError(w, r, http.StatusBadRequest, "invalid_limit", "limit must be an integer from 1 to 100", "")
				return
			}
			limit = n
		}
		top, err := s.Boards.Top(r.Context(), globalBoard, allTimePeriod, limit)
		if s.degraded(w, err) {
			top, err = s.Fallback.Top(r.Context(), globalBoard, allTimePeriod, limit)
		}
		if err != nil {
			s.readFailed(w, r, err)
			return
		}
		resp := response{Board: globalBoard, Version: top.Version, Entries: make([]entry, len(top.Entries))}
		if !top.UpdatedAt.IsZero() {
			resp.UpdatedAt = &top.UpdatedAt
		}
		for i, e := range top.Entries {
			resp.Entries[i] = entry{Rank: e.Rank, UserID: e.UserID, Score: e.Score, NickName: e.NickName, UpdatedAt: e.UpdatedAt}
		}
		encode(w, http.StatusOK, resp)
	}
}

func (s *server) handleUser() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "user_id")
		if !messages.ValidUserID(id) {
			writeError(w, r, http.StatusBadRequest, "invalid_user_id", "user_id must be 1 to 64 of [A-Za-z0-9_.:-]", "")
			return
		}
		s.writeUser(w, r, id)
	}
}

func (s *server) handleMe() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.writeUser(w, r, claimsFrom(r.Context()).Subject)
	}
}

func (s *server) writeUser(w http.ResponseWriter, r *http.Request, userID string) {
	e, err := s.Boards.User(r.Context(), globalBoard, allTimePeriod, userID)
	if s.degraded(w, err) {
		e, err = s.Fallback.User(r.Context(), globalBoard, allTimePeriod, userID)
	}
	if errors.Is(err, storage.ErrNotFound) {
		writeError(w, r, http.StatusNotFound, "not_found", "user has no score on this board", "")
		return
	}
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	encode(w, http.StatusOK, userEntry{UserID: e.UserID, Score: e.Score, Rank: e.Rank, UpdatedAt: e.UpdatedAt})
}

func (s *server) readFailed(w http.ResponseWriter, r *http.Request, err error) {
	s.Logger.Warn("read failed", "err", err, "request_id", requestIDFrom(r.Context()))
	writeError(w, r, http.StatusServiceUnavailable, "dependency_unavailable", "the leaderboard store is unavailable", "")
}

// degraded reports whether a Redis read failed for unavailability and PostgreSQL can
// answer instead; it then marks the response as degraded.
func (s *server) degraded(w http.ResponseWriter, err error) bool {
	if s.Fallback == nil || !errors.Is(err, storage.ErrUnavailable) {
		return false
	}
	w.Header().Set("X-Leaderboard-Degraded", "redis-unavailable")
	s.metrics.degraded.Inc()
	return true
}
