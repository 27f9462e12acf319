package http

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// maxBodyBytes bounds a write request's body.
const maxBodyBytes = 4 << 10

const (
	globalBoard   = "global"
	allTimePeriod = "all_time"
)

// apiError is a client-facing failure: status, error code and message.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

func badRequest(code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, message: fmt.Sprintf(format, args...)}
}

// decodeStrict decodes one JSON object into dst: unknown fields, trailing data and
// bodies over maxBodyBytes are errors.
func decodeStrict(w http.ResponseWriter, r *http.Request, dst any) *apiError {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("trailing data after the JSON object")
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooBig):
		return badRequest("body_too_large", "request body is larger than %d bytes", maxBodyBytes)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("unknown_field", "%s", strings.TrimPrefix(err.Error(), "json: "))
	case errors.Is(err, io.EOF):
		return badRequest("invalid_json", "request body is empty")
	default:
		return badRequest("invalid_json", "request body is not a valid JSON object: %v", err)
	}
}

// parseValue reads a JSON integer (not a string, fraction or exponent) within the
// board's bounds.
func parseValue(field string, raw json.RawMessage, b configs.Board) (int64, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, badRequest("invalid_score", "%s is required", field)
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, badRequest("invalid_score", "%s must be a JSON integer (int64), got %s", field, raw)
	}
	if v < b.MinValue || v > b.MaxValue {
		return 0, badRequest("score_out_of_range", "%s must be between %d and %d on board %s", field, b.MinValue, b.MaxValue, b.ID)
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

func bodyHash(board, period, user string, value int64) []byte {
	h := sha256.Sum256(fmt.Appendf(nil, "%s|%s|%s|%d", board, period, user, value))
	return h[:]
}

func (s *server) handleSubmitScore() http.HandlerFunc {
	type request struct {
		Score   json.RawMessage `json:"score"`
		EventID *string         `json:"event_id"`
		UserID  *string         `json:"user_id"`
	}
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
		value, e := parseValue("score", req.Score, board)
		if e != nil {
			fail(e, echoID)
			return
		}
		userID, e := resolveUser(claims, req.UserID)
		if e != nil {
			fail(e, echoID)
			return
		}
		hash := bodyHash(board.ID, allTimePeriod, userID, value)
		ctx := r.Context()

		// A best score that does not beat the stored one changes nothing: answer from Redis.
		// When Redis cannot answer, the command is accepted and the projector decides.
		if cur, err := s.Boards.User(ctx, board.ID, allTimePeriod, userID); err == nil && value <= cur.Score {
			if clientID {
				stored, err := s.Requests.LookupRequest(ctx, userID, eventID)
				switch {
				case err == nil && bytes.Equal(stored, hash):
					s.metrics.accepts.WithLabelValues("duplicate").Inc()
					encode(w, http.StatusAccepted, accepted{EventID: eventID, Status: "accepted"})
					return
				case err == nil:
					s.metrics.accepts.WithLabelValues("conflict").Inc()
					writeError(w, r, http.StatusConflict, "event_id_conflict", "event_id was already used with a different body", eventID)
					return
				case !errors.Is(err, storage.ErrNotFound):
					s.unavailable(w, r, err, eventID)
					return
				}
			}
			s.metrics.accepts.WithLabelValues("unchanged").Inc()
			encode(w, http.StatusOK, entryResponse{Status: "unchanged", UserID: userID, Score: cur.Score, Rank: cur.Rank, UpdatedAt: cur.UpdatedAt})
			return
		}

		cmd := messages.ScoreSubmitted{
			EventID: eventID, Board: board.ID, Period: allTimePeriod, UserID: userID,
			Value: value, OccurredAt: time.Now().UTC(),
		}
		if userID == claims.Subject { // a server's token names the server, not the player
			cmd.NickName = messages.CleanNickName(claims.Name)
		}
		msg, err := commandMessage(cmd, requestIDFrom(ctx))
		if err != nil {
			s.unavailable(w, r, err, eventID)
			return
		}
		outcome, err := s.Commands.Accept(ctx, storage.Command{EventID: eventID, UserID: userID, Board: board.ID, BodyHash: hash, Msg: msg})
		if err != nil {
			s.unavailable(w, r, err, eventID)
			return
		}
		s.Logger.Debug("score command", "outcome", outcome, "request_id", requestIDFrom(ctx), "event_id", eventID, "user_id", userID)
		switch outcome {
		case storage.Conflict:
			s.metrics.accepts.WithLabelValues("conflict").Inc()
			writeError(w, r, http.StatusConflict, "event_id_conflict", "event_id was already used with a different body", eventID)
			return
		case storage.Duplicate:
			s.metrics.accepts.WithLabelValues("duplicate").Inc()
		default:
			s.metrics.accepts.WithLabelValues("accepted").Inc()
		}
		if r.URL.Query().Get("wait") == "true" {
			if cur, ok := s.waitApplied(ctx, eventID, board.ID, userID, value); ok {
				encode(w, http.StatusOK, entryResponse{Status: "applied", EventID: eventID, UserID: userID, Score: cur.Score, Rank: cur.Rank, UpdatedAt: cur.UpdatedAt})
				return
			}
		}
		encode(w, http.StatusAccepted, accepted{EventID: eventID, Status: "accepted"})
	}
}

// waitApplied polls until the projection applied the event and Redis shows it (an entry
// of at least value: the board keeps the best score, and PostgreSQL is written before
// Redis), or WaitTimeout passes.
func (s *server) waitApplied(ctx context.Context, eventID, board, userID string, value int64) (storage.Entry, bool) {
	ctx, cancel := context.WithTimeout(ctx, s.WaitTimeout)
	defer cancel()
	delay := 5 * time.Millisecond
	for {
		if ok, err := s.Requests.IsApplied(ctx, userID, eventID); err == nil && ok {
			if cur, err := s.Boards.User(ctx, board, allTimePeriod, userID); err == nil && cur.Score >= value {
				return cur, true
			}
		}
		select {
		case <-ctx.Done():
			return storage.Entry{}, false
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

func (s *server) unavailable(w http.ResponseWriter, r *http.Request, err error, eventID string) {
	s.metrics.accepts.WithLabelValues("unavailable").Inc()
	s.Logger.Warn("dependency unavailable", "err", err, "request_id", requestIDFrom(r.Context()), "event_id", eventID)
	writeError(w, r, http.StatusServiceUnavailable, "dependency_unavailable", "a dependency is unavailable, retry with the same event_id", eventID)
}

// commandMessage is the outbox message of a command: UUID = event id, JSON payload, and
// the metadata the relay and projector use.
func commandMessage(cmd messages.ScoreSubmitted, correlationID string) (*message.Message, error) {
	body, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("marshal command: %w", err)
	}
	msg := message.NewMessage(cmd.EventID, body)
	msg.Metadata.Set(messages.MetaEventID, cmd.EventID)
	msg.Metadata.Set(messages.MetaPartitionKey, cmd.UserID)
	msg.Metadata.Set(messages.MetaCorrelationID, correlationID)
	msg.Metadata.Set(messages.MetaAcceptedAt, cmd.OccurredAt.Format(time.RFC3339Nano))
	return msg, nil
}
