package http

import (
	"encoding/json"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
)

// matchBoard returns the board of a match (the definition with period match) and the
// boards every match point also feeds (match_points: daily and season as shipped).
func (s *server) matchBoard(matchID string) (configs.Board, []configs.Board, bool) {
	var def configs.Board
	found := false
	var also []configs.Board
	for _, b := range s.Config.Boards {
		switch {
		case b.Period == configs.PeriodMatch && !found:
			def, found = b, true
		case b.MatchPoints:
			also = append(also, b)
		}
	}
	if !found || !configs.ValidMatchID(matchID) {
		return configs.Board{}, nil, false
	}
	b, ok := s.Config.Board(def.ID + ":" + matchID)
	return b, also, ok
}

// handleMatchPoint answers POST /v1/matches/{match_id}/users/{user_id}/point {"point",
// "event_id"?} (role server): one command, with one event id, that adds the point to the
// match's board, the day's and the season's, each exactly once.
func (s *server) handleMatchPoint() http.HandlerFunc {
	type request struct {
		Point   json.RawMessage `json:"point"`
		EventID *string         `json:"event_id"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		matchID, userID := chi.URLParam(r, "match_id"), chi.URLParam(r, "user_id")
		b, also, ok := s.matchBoard(matchID)
		if !ok {
			writeError(w, r, http.StatusNotFound, "unknown_board", "no match board, or a match id that is not 1 to 64 of [A-Za-z0-9_.-]", "")
			return
		}
		// A player's match point is refused as a server-only board's write is: counted and
		// recorded (an anomaly of the token's user).
		if c := claimsFrom(r.Context()); !c.HasRole("server") {
			detail := ""
			if messages.ValidUserID(userID) {
				detail = "a match point for " + userID
			}
			s.reject(w, r, b.ID, s.Guard.refuse(guarded{board: b, userID: c.Subject, subject: c.Subject},
				&apiError{status: http.StatusForbidden, code: "forbidden", message: "match points come from game servers (role server)"}, detail), "")
			return
		}
		if !messages.ValidUserID(userID) {
			s.reject(w, r, b.ID, badRequest("invalid_user_id", "user_id must be 1 to 64 of [A-Za-z0-9_.:-]"), "")
			return
		}
		var req request
		if e := decodeStrict(w, r, &req); e != nil {
			s.reject(w, r, b.ID, e, "")
			return
		}
		s.write(w, r, b, "point", writeRequest{Value: req.Point, EventID: req.EventID, UserID: &userID, Also: also})
	}
}
