package http

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// entryView is one ranked entry in an answer.
type entryView struct {
	Rank      int64           `json:"rank"`
	UserID    string          `json:"user_id"`
	Score     int64           `json:"score"`
	NickName  string          `json:"nick_name,omitempty"`
	UpdatedAt time.Time       `json:"updated_at"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

func viewOf(e storage.Entry) entryView {
	return entryView{Rank: e.Rank, UserID: e.UserID, Score: e.Score, NickName: e.NickName, UpdatedAt: e.UpdatedAt, Metadata: e.Metadata}
}

// userView is a user's entry, with its neighbours when asked for.
type userView struct {
	UserID    string          `json:"user_id"`
	Score     int64           `json:"score"`
	Rank      int64           `json:"rank"`
	UpdatedAt time.Time       `json:"updated_at"`
	Board     string          `json:"board"`
	Period    string          `json:"period"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	Around    []entryView     `json:"around,omitempty"`
}

// board resolves a board id (match:{id} included), answering 404 when it names none.
func (s *server) board(w http.ResponseWriter, r *http.Request, id string) (configs.Board, bool) {
	b, ok := s.Config.Board(id)
	if !ok {
		writeError(w, r, http.StatusNotFound, "unknown_board", "no board "+strconv.Quote(id)+" (GET /v1/boards lists them)", "")
	}
	return b, ok
}

// period resolves ?period= of a board, answering 400 or 404 when it names no period.
func (s *server) period(w http.ResponseWriter, r *http.Request, b configs.Board) (string, bool) {
	return s.resolvePeriod(w, r, b, r.URL.Query().Get("period"))
}

// resolvePeriod resolves a period parameter's value (seed 004's ?date= and ?season= too).
func (s *server) resolvePeriod(w http.ResponseWriter, r *http.Request, b configs.Board, raw string) (string, bool) {
	p, err := s.Periods.Resolve(r.Context(), b, raw)
	switch {
	case errors.Is(err, errBadPeriod):
		writeError(w, r, http.StatusBadRequest, "invalid_period", err.Error(), "")
	case errors.Is(err, errUnknownPeriod):
		writeError(w, r, http.StatusNotFound, "unknown_period", err.Error(), "")
	case err != nil:
		s.readFailed(w, r, err)
	default:
		return p, true
	}
	return "", false
}

// limit reads ?limit= (1–100, default 10).
func limitParam(w http.ResponseWriter, r *http.Request) (int, bool) {
	raw := r.URL.Query().Get("limit")
	if raw == "" {
		return 10, true
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > 100 {
		writeError(w, r, http.StatusBadRequest, "invalid_limit", "limit must be an integer from 1 to 100", "")
		return 0, false
	}
	return n, true
}

// handleTop answers GET /v1/leaderboard/top (the global board) and
// GET /v1/boards/{board_id}/top.
func (s *server) handleTop(fixedBoard string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := fixedBoard
		if id == "" {
			id = chi.URLParam(r, "board_id")
		}
		b, ok := s.board(w, r, id)
		if !ok {
			return
		}
		limit, ok := limitParam(w, r)
		if !ok {
			return
		}
		period, ok := s.period(w, r, b)
		if !ok {
			return
		}
		top, degraded, err := s.Reads.top(r.Context(), b, period, limit)
		s.markDegraded(w, degraded)
		if errors.Is(err, storage.ErrNotFound) {
			writeError(w, r, http.StatusNotFound, "unknown_board", err.Error(), "")
			return
		}
		if err != nil {
			s.readFailed(w, r, err)
			return
		}
		resp := topResponse{Board: b.Key(), Period: period, Version: top.Version, Entries: make([]entryView, len(top.Entries))}
		if !top.UpdatedAt.IsZero() && len(top.Entries) > 0 { // null for an empty board
			resp.UpdatedAt = &top.UpdatedAt
		}
		for i, e := range top.Entries {
			resp.Entries[i] = viewOf(e)
		}
		encodeTop(w, resp)
	}
}

// handleUser answers GET /v1/leaderboard/users/{user_id} and
// GET /v1/boards/{board_id}/users/{user_id}.
func (s *server) handleUser(fixedBoard string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "user_id")
		if !messages.ValidUserID(id) {
			writeError(w, r, http.StatusBadRequest, "invalid_user_id", "user_id must be 1 to 64 of [A-Za-z0-9_.:-]", "")
			return
		}
		s.writeUser(w, r, fixedBoard, id)
	}
}

// handleMe answers GET /v1/leaderboard/me.
func (s *server) handleMe() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.writeUser(w, r, globalBoard, claimsFrom(r.Context()).Subject)
	}
}

func (s *server) writeUser(w http.ResponseWriter, r *http.Request, fixedBoard, userID string) {
	id := fixedBoard
	if id == "" {
		id = chi.URLParam(r, "board_id")
	}
	b, ok := s.board(w, r, id)
	if !ok {
		return
	}
	period, ok := s.period(w, r, b)
	if !ok {
		return
	}
	around, ok := intParam(w, r, "around", 0, 1, 50, "invalid_around")
	if !ok {
		return
	}
	var e storage.Entry
	var near []storage.Entry
	var degraded bool
	var err error
	if around > 0 {
		e, near, degraded, err = s.Reads.around(r.Context(), b, period, userID, around)
	} else {
		e, degraded, err = s.Reads.user(r.Context(), b, period, userID)
	}
	s.markDegraded(w, degraded)
	if errors.Is(err, errNoMatch) {
		writeError(w, r, http.StatusNotFound, "unknown_board", err.Error(), "")
		return
	}
	if errors.Is(err, storage.ErrNotFound) {
		writeError(w, r, http.StatusNotFound, "not_found", "user has no entry on this board and period", "")
		return
	}
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	view := userView{UserID: e.UserID, Score: e.Score, Rank: e.Rank, UpdatedAt: e.UpdatedAt, Board: b.Key(), Period: period, Metadata: e.Metadata}
	if around > 0 {
		view.Around = make([]entryView, len(near))
		for i, n := range near {
			view.Around[i] = viewOf(n)
		}
	}
	encodeUser(w, view)
}

func (s *server) readFailed(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, errReadsQueued): // the user's own earlier reads still run
		w.Header().Set("Retry-After", "1")
		writeError(w, r, http.StatusTooManyRequests, "rate_limited", "this user's reads answered from PostgreSQL run one at a time; retry when the earlier one ends", "")
		return
	case errors.Is(err, errPostgresReadsBusy):
		w.Header().Set("Retry-After", "1")
		writeError(w, r, http.StatusServiceUnavailable, "dependency_unavailable", "every slot for reads answered from PostgreSQL is taken; retry", "")
		return
	}
	s.Logger.Warn("read failed", "err", err, "request_id", requestIDFrom(r.Context()))
	writeError(w, r, http.StatusServiceUnavailable, "dependency_unavailable", "the leaderboard store is unavailable", "")
}

// markDegraded marks a response answered from PostgreSQL because Redis was unavailable.
func (s *server) markDegraded(w http.ResponseWriter, degraded bool) {
	if degraded {
		w.Header().Set("X-Leaderboard-Degraded", "redis-unavailable")
		s.metrics.degraded.Inc()
	}
}
