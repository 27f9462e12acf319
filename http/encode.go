package http

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

type errorBody struct {
	ErrorCode string `json:"error_code"`
	Message   string `json:"message"`
	EventID   string `json:"event_id,omitempty"`
}

// encode writes v as JSON with the status.
func encode(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// encodeAccepted writes the answer of an accepted write, byte for byte what encode writes
// for {"event_id", "status": "accepted", "processed_event_id" (when processed)}, without
// reflection: every accepted write answers it.
func encodeAccepted(w http.ResponseWriter, eventID string, processed bool) {
	buf := make([]byte, 0, 48+2*len(eventID))
	buf = append(buf, `{"event_id":`...)
	buf = appendJSONString(buf, eventID)
	buf = append(buf, `,"status":"accepted"`...)
	if processed && eventID != "" { // omitempty
		buf = append(buf, `,"processed_event_id":`...)
		buf = appendJSONString(buf, eventID)
	}
	buf = append(buf, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(buf)
}

// appendJSONString appends s as encoding/json writes a string (HTML characters escaped).
// Printable ASCII other than ", \, <, > and & is written as it is; anything else goes
// through json.Marshal.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// writeError writes the API's error format.
func writeError(w http.ResponseWriter, _ *http.Request, status int, code, msg, eventID string) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="leaderboard"`)
	}
	encode(w, status, errorBody{ErrorCode: code, Message: msg, EventID: eventID})
}

// apiError is a client-facing failure: status, error code and message.
type apiError struct {
	status  int
	code    string
	message string
	// retryAfter, when set, is answered as Retry-After (whole seconds, rounded up).
	retryAfter time.Duration
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
