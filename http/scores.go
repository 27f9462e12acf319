package http

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/openleaderboard/leaderboard/messages"
)

// maxBodyBytes bounds a write request's body.
const maxBodyBytes = 4 << 10

const (
	globalBoard   = "global"
	allTimePeriod = "all_time"
)

// parseInteger reads a JSON integer (not a string, fraction or exponent) that fits int64.
func parseInteger(field string, raw json.RawMessage) (int64, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, badRequest("invalid_score", "%s is required", field)
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, badRequest("invalid_score", "%s must be a JSON integer (int64), got %s", field, raw)
	}
	return v, nil
}

// resolveEventID checks a client's event id or generates one.
func resolveEventID(id *string) (string, bool, *apiError) {
	if id == nil {
		return uuid.NewString(), false, nil
	}
	if !messages.ValidEventID(*id) {
		return "", false, badRequest("invalid_event_id", "event_id must be 1 to 64 printable characters without spaces")
	}
	return *id, true, nil
}

// resolveUser decides whose score this is: the token's own user, or with the server role
// any user named in the body.
func resolveUser(c *Claims, bodyUser *string) (string, *apiError) {
	if bodyUser == nil || *bodyUser == c.Subject {
		return c.Subject, nil
	}
	if !messages.ValidUserID(*bodyUser) {
		return "", badRequest("invalid_user_id", "user_id must be 1 to 64 of [A-Za-z0-9_.:-]")
	}
	if !c.HasRole("server") {
		return "", &apiError{status: http.StatusForbidden, code: "forbidden", message: "a player token may only submit its own scores"}
	}
	return *bodyUser, nil
}

func (s *server) handleSubmitScore() http.HandlerFunc {
	type request struct {
		Score   json.RawMessage `json:"score"`
		EventID *string         `json:"event_id"`
		UserID  *string         `json:"user_id"`
	}
	board, _ := s.Config.Board(globalBoard)
	return func(w http.ResponseWriter, r *http.Request) {
		claims := claimsFrom(r.Context())
		var req request
		fail := func(e *apiError, eventID string) {
			s.metrics.accepts.WithLabelValues("rejected").Inc()
			writeError(w, r, e.status, e.code, e.message, eventID)
		}
		if e := decodeStrict(w, r, &req); e != nil {
			fail(e, "")
			return
		}
		eventID, clientID, e := resolveEventID(req.EventID)
		if e != nil {
			fail(e, "")
			return
		}
		echoID := "" // errors name the event id only when the client chose it
		if clientID {
			echoID = eventID
		}
		value, e := parseInteger("score", req.Score)
		if e != nil {
			fail(e, echoID)
			return
		}
		userID, e := resolveUser(claims, req.UserID)
		if e != nil {
			fail(e, echoID)
			return
		}
		sub := submit{Board: board, UserID: userID, EventID: eventID, ClientEventID: clientID, Value: value, CorrelationID: requestIDFrom(r.Context())}
		if userID == claims.Subject { // a server's token names the server, not the player
			sub.NickName = messages.CleanNickName(claims.Name)
		}
		res, err := s.submissions.Submit(r.Context(), sub)
		s.answerSubmission(w, r, sub, res, err)
	}
}

// answerSubmission maps a submission's outcome and errors to the API's answers.
func (s *server) answerSubmission(w http.ResponseWriter, r *http.Request, sub submit, res submitted, err error) {
	type accepted struct {
		EventID string `json:"event_id"`
		Status  string `json:"status"`
	}
	type entryResponse struct {
		Status    string    `json:"status"`
		EventID   string    `json:"event_id,omitempty"`
		UserID    string    `json:"user_id"`
		Score     int64     `json:"score"`
		Rank      int64     `json:"rank"`
		UpdatedAt time.Time `json:"updated_at"`
	}
	echoID := ""
	if sub.ClientEventID {
		echoID = sub.EventID
	}
	switch {
	case errors.Is(err, errValueOutOfRange):
		s.metrics.accepts.WithLabelValues("rejected").Inc()
		b := sub.Board
		writeError(w, r, http.StatusBadRequest, "score_out_of_range", fmt.Sprintf("score must be between %d and %d on board %s", b.MinValue, b.MaxValue, b.ID), echoID)
		return
	case errors.Is(err, errEventIDConflict):
		s.metrics.accepts.WithLabelValues("conflict").Inc()
		writeError(w, r, http.StatusConflict, "event_id_conflict", err.Error(), sub.EventID)
		return
	case err != nil:
		s.unavailable(w, r, err, sub.EventID)
		return
	case res.Unchanged:
		s.metrics.accepts.WithLabelValues("unchanged").Inc()
		encode(w, http.StatusOK, entryResponse{Status: "unchanged", UserID: sub.UserID, Score: res.Entry.Score, Rank: res.Entry.Rank, UpdatedAt: res.Entry.UpdatedAt})
		return
	}
	s.metrics.accepts.WithLabelValues(res.Outcome.String()).Inc()
	s.Logger.Debug("score command", "outcome", res.Outcome, "request_id", requestIDFrom(r.Context()), "event_id", sub.EventID, "user_id", sub.UserID)
	if r.URL.Query().Get("wait") == "true" {
		ctx, cancel := context.WithTimeout(r.Context(), s.WaitTimeout)
		defer cancel()
		if cur, ok := s.submissions.WaitApplied(ctx, sub, res.Period); ok {
			encode(w, http.StatusOK, entryResponse{Status: "applied", EventID: sub.EventID, UserID: sub.UserID, Score: cur.Score, Rank: cur.Rank, UpdatedAt: cur.UpdatedAt})
			return
		}
	}
	encode(w, http.StatusAccepted, accepted{EventID: sub.EventID, Status: "accepted"})
}

func (s *server) unavailable(w http.ResponseWriter, r *http.Request, err error, eventID string) {
	s.metrics.accepts.WithLabelValues("unavailable").Inc()
	s.Logger.Warn("dependency unavailable", "err", err, "request_id", requestIDFrom(r.Context()), "event_id", eventID)
	writeError(w, r, http.StatusServiceUnavailable, "dependency_unavailable", "a dependency is unavailable, retry with the same event_id", eventID)
}
