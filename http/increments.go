package http

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
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
		if !validClientEventID(echoID) {
			echoID = ""
		}
		if req.Timestamp == nil {
			s.reject(w, r, b.ID, badRequest("invalid_timestamp", "timestamp (RFC 3339) is required"), echoID)
			return
		}
		// RFC 3339 lets "T" and "Z" be lower case (time.Parse does not); the signature
		// stays over the timestamp as sent.
		sent, err := time.Parse(time.RFC3339Nano, strings.ToUpper(*req.Timestamp))
		if err != nil {
			s.reject(w, r, b.ID, badRequest("invalid_timestamp", "timestamp must be RFC 3339, e.g. 2026-11-23T10:00:00Z"), echoID)
			return
		}
		action, e := actionOf(req.ActionID)
		if e != nil {
			s.reject(w, r, b.ID, e, echoID)
			return
		}
		if s.Config.SigningSecret != "" {
			// The user is checked first: a refusal is recorded as the named user's anomaly,
			// and a player may name only itself.
			claims := claimsFrom(r.Context())
			userID, e := resolveUser(claims, req.UserID)
			if e != nil {
				s.reject(w, r, b.ID, e, echoID)
				return
			}
			gw := guarded{board: b, userID: userID, eventID: echoID, server: claims.HasRole("server"), subject: claims.Subject}
			if e := s.checkSignature(*req.UserID, req.Delta, *req.EventID, *req.Timestamp, req.Signature, sent); e != nil {
				s.reject(w, r, b.ID, s.Guard.refuse(gw, e, ""), echoID)
				return
			}
		}
		s.write(w, r, b, "delta", writeRequest{Value: req.Delta, EventID: req.EventID, UserID: req.UserID, Action: action, Signed: true})
	}
}

// checkSignature checks an increment's signature: the lowercase hex of
// HMAC-SHA256(LEADERBOARD_SIGNING_SECRET, user_id|delta|event_id|timestamp), over the
// fields as sent, compared in constant time; then that the timestamp is within
// SignatureSkew of the server's clock. A captured request replayed later is refused by
// its timestamp; within the window its event id answers it as the first time.
func (s *server) checkSignature(userID string, delta json.RawMessage, eventID, timestamp string, signature *string, sent time.Time) *apiError {
	if signature == nil {
		return &apiError{status: http.StatusUnauthorized, code: "invalid_signature", message: "signature is required: lowercase hex of HMAC-SHA256(secret, user_id|delta|event_id|timestamp)"}
	}
	mac := hmac.New(sha256.New, []byte(s.Config.SigningSecret))
	fmt.Fprintf(mac, "%s|%s|%s|%s", userID, delta, eventID, timestamp)
	want := hex.EncodeToString(mac.Sum(nil))
	if subtle.ConstantTimeCompare([]byte(want), []byte(*signature)) != 1 {
		return &apiError{status: http.StatusUnauthorized, code: "invalid_signature", message: "signature does not match: lowercase hex of HMAC-SHA256(secret, user_id|delta|event_id|timestamp)"}
	}
	if skew := s.Now().Sub(sent); skew > configs.SignatureSkew || skew < -configs.SignatureSkew {
		return &apiError{status: http.StatusUnauthorized, code: "stale_timestamp", message: fmt.Sprintf("timestamp is more than %s from the server's clock", configs.SignatureSkew)}
	}
	return nil
}
