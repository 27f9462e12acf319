package http

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// The reads of seed 004, in its shapes: rankings of {user_id, point, ranking}.

// ranking is one entry in seed 004's shape.
type ranking struct {
	UserID  string `json:"user_id"`
	Point   int64  `json:"point"`
	Ranking int64  `json:"ranking"`
}

func rankingsOf(es []storage.Entry) []ranking {
	out := make([]ranking, len(es))
	for i, e := range es {
		out[i] = ranking{UserID: e.UserID, Point: e.Score, Ranking: e.Rank}
	}
	return out
}

// handleMatchScore answers GET /v1/match-leaderboard/{match_id}/score?limit=&period=: the
// rankings of one match (up to limit, default 100, at most 1000); 404 for a match without
// any point, and a period other than the match's one (all_time) refused as on any board.
func (s *server) handleMatchScore() http.HandlerFunc {
	type response struct {
		MatchID  string    `json:"match_id"`
		Rankings []ranking `json:"rankings"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		matchID := chi.URLParam(r, "match_id")
		b, _, ok := s.matchBoard(matchID)
		if !ok {
			writeError(w, r, http.StatusNotFound, "unknown_board", "no match "+matchID, "")
			return
		}
		limit, ok := intParam(w, r, "limit", 100, 1, 1000, "invalid_limit")
		if !ok {
			return
		}
		// A match has one period (all_time), which ?period= may name as every read's does.
		period, ok := s.resolvePeriod(w, r, b, r.URL.Query().Get("period"))
		if !ok {
			return
		}
		pg, ok := s.readPage(w, r, b, period, "", limit)
		if !ok {
			return
		}
		encode(w, http.StatusOK, response{MatchID: matchID, Rankings: rankingsOf(pg.entries)})
	}
}

// handleDailyPage answers GET /v1/daily-leaderboard?date=&size=&cursor=: a page of the day's
// rankings (size 1–1000, default 100) and the cursor of the next one (null at the end).
func (s *server) handleDailyPage() http.HandlerFunc {
	type response struct {
		Date     string    `json:"date"`
		Rankings []ranking `json:"rankings"`
		Cursor   *string   `json:"cursor"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := s.board(w, r, "daily")
		if !ok {
			return
		}
		size, ok := intParam(w, r, "size", 100, 1, 1000, "invalid_size")
		if !ok {
			return
		}
		cursor := r.URL.Query().Get("cursor")
		raw, ok := seed004Period(w, r, "date")
		if !ok {
			return
		}
		date, ok := s.pagePeriod(w, r, b, raw, cursor)
		if !ok {
			return
		}
		pg, ok := s.readPage(w, r, b, date, cursor, size)
		if !ok {
			return
		}
		encode(w, http.StatusOK, response{Date: date, Rankings: rankingsOf(pg.entries), Cursor: pg.next})
	}
}

// seed004Period is the period a seed 004 read names: its own parameter (date or season),
// or ?period=, which every read takes (API.md); 400 when the two name different periods.
func seed004Period(w http.ResponseWriter, r *http.Request, param string) (string, bool) {
	own, period := r.URL.Query().Get(param), r.URL.Query().Get("period")
	switch {
	case period == "":
		return own, true
	case own == "" || own == period:
		return period, true
	}
	writeError(w, r, http.StatusBadRequest, "invalid_period", param+"="+own+" and period="+period+" name different periods: give one", "")
	return "", false
}

// handleSeed004User answers GET /v1/daily-leaderboard/users/{user_id}?date= and
// GET /v1/season-leaderboard/users/{user_id}?season=: the user's point and ranking of that
// day or season, under the key param names.
func (s *server) handleSeed004User(board, param string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := s.board(w, r, board)
		if !ok {
			return
		}
		userID := chi.URLParam(r, "user_id")
		if !messages.ValidUserID(userID) {
			writeError(w, r, http.StatusBadRequest, "invalid_user_id", "user_id must be 1 to 64 of [A-Za-z0-9_.:-]", "")
			return
		}
		raw, ok := seed004Period(w, r, param)
		if !ok {
			return
		}
		period, ok := s.resolvePeriod(w, r, b, raw)
		if !ok {
			return
		}
		e, degraded, err := s.Reads.user(r.Context(), b, period, userID)
		s.markDegraded(w, degraded)
		if errors.Is(err, storage.ErrNotFound) {
			writeError(w, r, http.StatusNotFound, "not_found", "user has no points on this "+param, "")
			return
		}
		if err != nil {
			s.readFailed(w, r, err)
			return
		}
		encode(w, http.StatusOK, map[string]any{param: period, "user_id": userID, "point": e.Score, "ranking": e.Rank})
	}
}
