package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// maxBodyBytes bounds a write request's body.
const maxBodyBytes = 4 << 10

const globalBoard = "global"

// writeRequest is what every write endpoint decodes into.
type writeRequest struct {
	Value    json.RawMessage
	EventID  *string
	UserID   *string
	Metadata json.RawMessage
	// Also are more boards the value counts for (match points).
	Also []configs.Board
	// Action is an increment's action_id (for the board's cooldown).
	Action string
	// Signed: the write came through POST /v1/scores/increment, which checks its
	// signature when a signing secret is set.
	Signed bool
}

// scoreBody is the body of POST /v1/scores.
type scoreBody struct {
	Score   json.RawMessage `json:"score"`
	EventID *string         `json:"event_id"`
	UserID  *string         `json:"user_id"`
}

// decodeFlat reads a body of plain members (messages.ScanFlat) as encoding/json would.
func (b *scoreBody) decodeFlat(members []messages.FlatMember) bool {
	value, eventID, userID, ok := decodeFlatWrite(members, "score")
	if ok {
		*b = scoreBody{Score: value, EventID: eventID, UserID: userID}
	}
	return ok
}

// boardWriteBody is the body of POST /v1/boards/{board_id}/scores.
type boardWriteBody struct {
	Value    json.RawMessage `json:"value"`
	EventID  *string         `json:"event_id"`
	UserID   *string         `json:"user_id"`
	Metadata json.RawMessage `json:"metadata"`
	ActionID *string         `json:"action_id"`
}

// decodeFlat reads a body of plain members (messages.ScanFlat) as encoding/json would;
// metadata, an object, is never plain, and a body with an action_id is read by encoding/json.
func (b *boardWriteBody) decodeFlat(members []messages.FlatMember) bool {
	value, eventID, userID, ok := decodeFlatWrite(members, "value")
	if ok {
		*b = boardWriteBody{Value: value, EventID: eventID, UserID: userID}
	}
	return ok
}

// decodeFlatWrite reads the members of a write's body: the value under valueKey (copied:
// the body's buffer is reused), event_id and user_id, strings; false at anything else.
func decodeFlatWrite(members []messages.FlatMember, valueKey string) (value json.RawMessage, eventID, userID *string, ok bool) {
	for _, m := range members {
		switch string(m.Key) {
		case valueKey:
			value = json.RawMessage(bytes.Clone(m.Value))
		case "event_id":
			if eventID = flatString(m); eventID == nil {
				return nil, nil, nil, false
			}
		case "user_id":
			if userID = flatString(m); userID == nil {
				return nil, nil, nil, false
			}
		default:
			return nil, nil, nil, false
		}
	}
	return value, eventID, userID, true
}

// flatString is a plain member's string, nil when it is an integer.
func flatString(m messages.FlatMember) *string {
	if !m.IsString() {
		return nil
	}
	s := string(m.Value[1 : len(m.Value)-1])
	return &s
}

// actionOf reads a write's action_id (for its board's action_cooldown): "" for none.
func actionOf(raw *string) (string, *apiError) {
	if raw == nil {
		return "", nil
	}
	if !messages.ValidUserID(*raw) {
		return "", badRequest("invalid_action_id", "action_id must be 1 to 64 of [A-Za-z0-9_.:-]")
	}
	return *raw, nil
}

// handleSubmitScore answers POST /v1/scores: a best score on the global board.
func (s *server) handleSubmitScore() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := s.board(w, r, globalBoard) // a boards file may leave it out
		if !ok {
			return
		}
		var req scoreBody
		if e := decodeStrict(w, r, &req); e != nil {
			s.reject(w, r, b.ID, e, "")
			return
		}
		s.write(w, r, b, "score", writeRequest{Value: req.Score, EventID: req.EventID, UserID: req.UserID})
	}
}

// handleBoardWrite answers POST /v1/boards/{board_id}/scores: a value on any board, by its
// operator.
func (s *server) handleBoardWrite() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := s.board(w, r, chi.URLParam(r, "board_id"))
		if !ok {
			return
		}
		var req boardWriteBody
		if e := decodeStrict(w, r, &req); e != nil {
			s.reject(w, r, b.ID, e, "")
			return
		}
		action, e := actionOf(req.ActionID)
		if e != nil {
			s.reject(w, r, b.ID, e, "")
			return
		}
		s.write(w, r, b, "value", writeRequest{Value: req.Value, EventID: req.EventID, UserID: req.UserID, Metadata: req.Metadata, Action: action})
	}
}

// write checks a decoded write, submits it and answers.
func (s *server) write(w http.ResponseWriter, r *http.Request, b configs.Board, valueField string, req writeRequest) {
	claims := claimsFrom(r.Context())
	eventID, clientID, e := resolveEventID(req.EventID)
	if e != nil {
		s.reject(w, r, b.ID, e, "")
		return
	}
	echoID := "" // errors name the event id only when the client chose it
	if clientID {
		echoID = eventID
	}
	gw := guarded{board: b, userID: claims.Subject, eventID: eventID, server: claims.HasRole("server"), subject: claims.Subject, action: req.Action}
	if b.ServerOnly && !gw.server {
		s.reject(w, r, b.ID, s.Guard.refuse(gw, &apiError{status: http.StatusForbidden, code: "server_only_board", message: "board " + b.Key() + " takes writes from game servers only (role server)"}, ""), echoID)
		return
	}
	// With a signing secret, a player's increments of the signed board come only signed,
	// through POST /v1/scores/increment: not through the generic write either.
	if s.Config.SigningSecret != "" && b.ID == incrementBoard && !req.Signed && !gw.server {
		s.reject(w, r, b.ID, s.Guard.refuse(gw, &apiError{status: http.StatusUnauthorized, code: "invalid_signature",
			message: "board " + incrementBoard + " takes a player's increments only signed, through POST /v1/scores/increment"}, ""), echoID)
		return
	}
	value, e := parseInteger(valueField, req.Value)
	if e != nil {
		s.reject(w, r, b.ID, e, echoID)
		return
	}
	userID, e := resolveUser(claims, req.UserID)
	if e != nil {
		s.reject(w, r, b.ID, e, echoID)
		return
	}
	gw.userID = userID
	meta, e := parseMetadata(req.Metadata)
	if e != nil {
		s.reject(w, r, b.ID, e, echoID)
		return
	}
	for i := -1; i < len(req.Also); i++ { // the board, then the ones the value also counts for
		x := b
		if i >= 0 {
			x = req.Also[i]
		}
		if !x.InBounds(value) {
			s.reject(w, r, b.ID, s.Guard.refuse(gw, badRequest("value_out_of_range", "%s", boundsMessage(x)), fmt.Sprintf("%s %d", valueField, value)), echoID)
			return
		}
	}
	sub := submit{Board: b, Also: req.Also, UserID: userID, EventID: eventID, ClientEventID: clientID, Value: value, Metadata: meta, CorrelationID: requestIDFrom(r.Context())}
	if userID == claims.Subject { // a server's token names the server, not the player
		sub.NickName = messages.CleanNickName(claims.Name)
	}
	prep, err := s.submissions.Prepare(r.Context(), sub) // its value read waits with the guard
	if err != nil {
		s.answerSubmission(w, r, sub, submitted{}, err)
		return
	}
	// A retry of a write accepted before is answered as the first time (or 409), not
	// refused for the rate, a full backlog or a cooldown, nor counted or recorded as
	// refused; one of a user banned since is answered as the first time when it is the same
	// write (not 409). Asked at most once (a full backlog, a ban, the rate limit and a
	// cooldown may all ask): a request log lookup in PostgreSQL, made only for a write about
	// to be refused.
	var seen *[2]bool
	lookup := func() [2]bool {
		if seen == nil {
			a, b := s.submissions.Seen(r.Context(), prep)
			seen = &[2]bool{a, b}
		}
		return *seen
	}
	retry := func() bool { return lookup()[0] }
	sameRetry := func() bool { return lookup()[1] }
	if e := s.Guard.check(r.Context(), &gw, retry, sameRetry); e != nil {
		s.reject(w, r, b.ID, e, echoID)
		return
	}
	res, err := s.submissions.Submit(r.Context(), prep)
	if (err == nil && (res.Outcome == storage.Duplicate || res.Retry)) || errors.Is(err, errEventIDConflict) || errors.Is(err, errUnchangedEntryGone) {
		// An event id seen before (a retry, answered as the first time, or 409): no new
		// write, and no action done by this one (a retry naming another action_id took that
		// action's lock, a retry of a claim whose cooldown ended took it again), unless it is
		// a duplicate of a copy sent at the same time, which passed the lock as this one's
		// retry: accepted after this one took the lock. (A 409's accepted write has another
		// body: it gives the lock back.)
		if errors.Is(err, errEventIDConflict) || !s.claimedSince(r.Context(), gw) {
			s.Guard.release(r.Context(), gw)
		}
		s.Guard.refund(r.Context(), gw)
	}
	// Any other error leaves the outcome unknown (a client that hung up while its command
	// waited for the outbox, a commit whose answer was lost: the command may still be
	// accepted), so the lock stays: the retry with the same event id it asks for holds it.
	s.answerSubmission(w, r, sub, res, err)
}

// claimedSince tells whether the write took its action's lock and a copy of it, sent at
// the same time, was accepted since: the event id recorded after the lock was taken (a
// retry of a claim whose cooldown had ended finds it recorded a cooldown or more before).
// How long ago PostgreSQL recorded it (its clock) is compared with the time elapsed since
// the take once the answer is back (the monotonic clock), so the API's and PostgreSQL's
// clocks need not agree, and the query's trip can only make the take look earlier than it
// was: by the answer's way back. (Measured before the query, a busy PostgreSQL made a
// sibling accepted right after the take look accepted before it, and the lock was given
// back: a second claim passed inside the cooldown.) False when the request log cannot tell
// in 2 s: the lock is given back.
func (s *server) claimedSince(ctx context.Context, gw guarded) bool {
	if !gw.cooling {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	ago, err := s.Requests.AcceptedAgo(ctx, gw.userID, gw.eventID)
	return err == nil && ago <= time.Since(gw.tookAt)
}

// reject answers a write refused for its input.
func (s *server) reject(w http.ResponseWriter, r *http.Request, board string, e *apiError, eventID string) {
	s.metrics.accepts.WithLabelValues(board, "rejected").Inc()
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(seconds(e.retryAfter), 10))
	}
	writeError(w, r, e.status, e.code, e.message, eventID)
}

// parseInteger reads a JSON integer (not a string, fraction or exponent) that fits int64.
func parseInteger(field string, raw json.RawMessage) (int64, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, badRequest("invalid_"+field, "%s is required", field)
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, badRequest("invalid_"+field, "%s must be a JSON integer (int64), got %s", field, raw)
	}
	return v, nil
}

// parseMetadata checks optional metadata: a JSON object of at most 1 KB, kept compact.
func parseMetadata(raw json.RawMessage) (json.RawMessage, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil || !messages.ValidMetadata(buf.Bytes()) {
		return nil, badRequest("invalid_metadata", "metadata must be a JSON object of at most %d bytes", messages.MaxMetadataBytes)
	}
	return buf.Bytes(), nil
}

// resolveEventID checks a client's event id or generates one.
func resolveEventID(id *string) (string, bool, *apiError) {
	if id == nil {
		return uuid.NewString(), false, nil
	}
	if !validClientEventID(*id) {
		return "", false, badRequest("invalid_event_id", "event_id must be 1 to 64 printable characters (the ASCII space among them; no control characters or other spaces), and valid UTF-8 (no U+FFFD)")
	}
	return *id, true, nil
}

// validClientEventID is messages.ValidEventID less U+FFFD: encoding/json decodes every
// invalid UTF-8 byte and unpaired surrogate escape to it, so "x\ud800" and "x\udbff"
// would be one event id, and the second write a retry of the first (never applied). The
// projector takes U+FFFD as it did: commands accepted before are not refused on the way.
func validClientEventID(id string) bool {
	return messages.ValidEventID(id) && !strings.ContainsRune(id, utf8.RuneError)
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

// answerSubmission maps a submission's outcome and errors to the API's answers.
func (s *server) answerSubmission(w http.ResponseWriter, r *http.Request, sub submit, res submitted, err error) {
	type entryResponse struct {
		Status           string          `json:"status"`
		EventID          string          `json:"event_id,omitempty"`
		UserID           string          `json:"user_id"`
		Score            int64           `json:"score"`
		Rank             int64           `json:"rank"`
		UpdatedAt        time.Time       `json:"updated_at"`
		Board            string          `json:"board"`
		Period           string          `json:"period"`
		Metadata         json.RawMessage `json:"metadata,omitempty"`
		NewScore         *int64          `json:"new_score,omitempty"`
		ProcessedEventID string          `json:"processed_event_id,omitempty"`
	}
	incr := sub.Board.Operator == configs.OpIncr // increments also answer new_score and processed_event_id
	switch {
	case errors.Is(err, errEventIDConflict):
		s.metrics.accepts.WithLabelValues(sub.Board.ID, "conflict").Inc()
		writeError(w, r, http.StatusConflict, "event_id_conflict", err.Error(), sub.EventID)
		return
	case errors.Is(err, errUnchangedEntryGone):
		s.metrics.accepts.WithLabelValues(sub.Board.ID, "unchanged").Inc()
		writeError(w, r, http.StatusNotFound, "not_found", err.Error(), sub.EventID)
		return
	case err != nil:
		s.metrics.accepts.WithLabelValues(sub.Board.ID, "unavailable").Inc()
		s.unavailable(w, r, err, sub.EventID)
		return
	case res.Unchanged:
		s.metrics.accepts.WithLabelValues(sub.Board.ID, "unchanged").Inc()
		encode(w, http.StatusOK, entryResponse{Status: "unchanged", UserID: sub.UserID, Score: res.Entry.Score, Rank: res.Entry.Rank,
			UpdatedAt: res.Entry.UpdatedAt, Board: sub.Board.Key(), Period: res.Period, Metadata: res.Entry.Metadata})
		return
	}
	s.metrics.accepts.WithLabelValues(sub.Board.ID, res.Outcome.String()).Inc()
	if s.Logger.Enabled(r.Context(), slog.LevelDebug) { // its attributes cost allocations on every write
		s.Logger.Debug("score command", "outcome", res.Outcome, "request_id", requestIDFrom(r.Context()), "event_id", sub.EventID, "user_id", sub.UserID)
	}
	// A banned user's retry is not waited for: the ban hides the user's entries from Redis,
	// where the wait looks for the write. Nor is a user's write past waitsPerUser waiting.
	if wantsWait(r) && !s.Guard.banned(sub.UserID) && s.waits.take(sub.UserID) {
		defer s.waits.give(sub.UserID)
		s.metrics.waits.Inc()
		defer s.metrics.waits.Dec()
		ctx, cancel := context.WithTimeout(r.Context(), s.WaitTimeout)
		defer cancel()
		if cur, period, ok := s.submissions.WaitApplied(ctx, sub, res); ok {
			resp := entryResponse{Status: "applied", EventID: sub.EventID, UserID: sub.UserID, Score: cur.Score, Rank: cur.Rank,
				UpdatedAt: cur.UpdatedAt, Board: sub.Board.Key(), Period: period, Metadata: cur.Metadata}
			if incr {
				resp.NewScore, resp.ProcessedEventID = &cur.Score, sub.EventID
			}
			encode(w, http.StatusOK, resp)
			return
		}
	}
	encodeAccepted(w, sub.EventID, incr)
}

// boundsMessage says what a board takes.
func boundsMessage(b configs.Board) string {
	if b.Operator == configs.OpIncr {
		return fmt.Sprintf("a delta on board %s must be from 1 to %d", b.Key(), b.MaxDelta)
	}
	return fmt.Sprintf("a value on board %s must be from %d to %d", b.Key(), b.MinValue, b.MaxValue)
}

func (s *server) unavailable(w http.ResponseWriter, r *http.Request, err error, eventID string) {
	s.Logger.Warn("dependency unavailable", "err", err, "request_id", requestIDFrom(r.Context()), "event_id", eventID)
	writeError(w, r, http.StatusServiceUnavailable, "dependency_unavailable", "a dependency is unavailable, retry with the same event_id", eventID)
}
