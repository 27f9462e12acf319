package http

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/openleaderboard/leaderboard/messages"
)

// incrementBoard is the board POST /v1/scores/increment adds to (seed 003).
const incrementBoard = "points"

// handleIncrement answers POST /v1/scores/increment {"user_id", "delta", "event_id",
// "timestamp", "signature"?, "action_id"?} (seed 003): a positive delta on the points board,
// answered with processed_event_id (and, with ?wait=true, new_score and rank).
func (s *server) handleIncrement() http.HandlerFunc {
	type request struct {
		UserID    *string         `json:"user_id"`
		Delta     json.RawMessage `json:"delta"`
		EventID   *string         `json:"event_id"`
		Timestamp *string         `json:"timestamp"`
		Signature *string         `json:"signature"`
		ActionID  *string         `json:"action_id"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := s.board(w, r, incrementBoard)
		if !ok {
			return
		}
		var req request
		if e := decodeStrict(w, r, &req); e != nil {
			s.reject(w, r, b.ID, e, "")
			return
		}
		// Seed 003 makes the user, the event id and the timestamp part of every increment.
		switch {
		case req.UserID == nil:
			s.reject(w, r, b.ID, badRequest("invalid_user_id", "user_id is required"), "")
			return
		case req.EventID == nil:
			s.reject(w, r, b.ID, badRequest("invalid_event_id", "event_id is required"), "")
			return
		}
		echoID := *req.EventID
		if !messages.ValidEventID(echoID) {
			echoID = ""
		}
		if req.Timestamp == nil {
			s.reject(w, r, b.ID, badRequest("invalid_timestamp", "timestamp (RFC 3339) is required"), echoID)
			return
		}
		if _, err := time.Parse(time.RFC3339Nano, *req.Timestamp); err != nil {
			s.reject(w, r, b.ID, badRequest("invalid_timestamp", "timestamp must be RFC 3339, e.g. 2026-11-23T10:00:00Z"), echoID)
			return
		}
		if req.ActionID != nil && !messages.ValidUserID(*req.ActionID) {
			s.reject(w, r, b.ID, badRequest("invalid_action_id", "action_id must be 1 to 64 of [A-Za-z0-9_.:-]"), echoID)
			return
		}
		s.write(w, r, b, "delta", writeRequest{Value: req.Delta, EventID: req.EventID, UserID: req.UserID})
	}
}
