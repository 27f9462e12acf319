package http

import (
	"bytes"
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
// bodies over maxBodyBytes are errors. A dst that is a flatRequest and a body that is a
// flat object of plain values is decoded without encoding/json (decodeFlat); anything
// else, and every error, goes through encoding/json on the same bytes.
func decodeStrict(w http.ResponseWriter, r *http.Request, dst any) *apiError {
	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if f, ok := dst.(flatRequest); ok && readErr == nil {
		if decodeFlat(body, f) {
			return nil
		}
		f.reset()
	}
	var src io.Reader = bytes.NewReader(body)
	if readErr != nil { // the decoder meets the error where it met it reading the body
		src = io.MultiReader(src, errReader{readErr})
	}
	dec := json.NewDecoder(src)
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

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// flatRequest is a request body decodeFlat can fill: set takes a field's value, a JSON
// number token or the content of a JSON string without escapes, and says whether the
// field takes it as encoding/json would (false: unknown field, or a value of another
// kind); reset empties the request again.
type flatRequest interface {
	set(key string, value []byte, isString bool) bool
	reset()
}

// decodeFlat fills f from a body that is one JSON object whose values are integers or
// strings of printable ASCII without escapes, every field known to f, with nothing after
// it but whitespace. It returns false for anything else, leaving the decoding and the
// error to encoding/json: what it accepts, encoding/json decodes alike (a test compares
// them on generated bodies).
func decodeFlat(body []byte, f flatRequest) bool {
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return skipSpace(body, i+1) == len(body)
	}
	for {
		key, next, ok := flatString(body, i)
		if !ok {
			return false
		}
		i = skipSpace(body, next)
		if i == len(body) || body[i] != ':' {
			return false
		}
		i = skipSpace(body, i+1)
		var value []byte
		var isString bool
		if value, next, ok = flatString(body, i); ok {
			isString = true
		} else if value, next, ok = flatInteger(body, i); !ok {
			return false
		}
		if !f.set(string(key), value, isString) {
			return false
		}
		i = skipSpace(body, next)
		if i == len(body) {
			return false
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return skipSpace(body, i+1) == len(body)
		default:
			return false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// flatString reads a JSON string at i made of printable ASCII without escapes: its
// content and the index after its closing quote.
func flatString(b []byte, i int) (content []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// flatInteger reads a JSON integer at i (-?(0|[1-9][0-9]*), not followed by a fraction or
// an exponent): the token and the index after it.
func flatInteger(b []byte, i int) (token []byte, next int, ok bool) {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	digits := j
	for j < len(b) && '0' <= b[j] && b[j] <= '9' {
		j++
	}
	switch {
	case j == digits, j-digits > 1 && b[digits] == '0':
		return nil, 0, false
	case j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E'):
		return nil, 0, false
	}
	return b[i:j], j, true
}
