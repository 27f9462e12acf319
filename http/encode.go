package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openleaderboard/leaderboard/messages"
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
// bodies over maxBodyBytes are errors, and so are member names that only match a field
// without regard to case (encoding/json's "Score" and "ſcore" for "score") and members
// named twice (which one counts is up to the parser: a strict proxy or audit log keeping
// the first would read another score than the service). A body of plain members
// (messages.ScanFlat) that dst reads itself (flatDecoder) is decoded without reflection;
// any other goes through encoding/json as it came, read error included.
func decodeStrict(w http.ResponseWriter, r *http.Request, dst any) *apiError {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	buf := bodyBuffers.Get().(*[maxBodyBytes + 1]byte)
	defer bodyBuffers.Put(buf)
	n, readErr := readFull(r.Body, buf[:])
	var body io.Reader
	switch {
	case readErr != nil:
		body = io.MultiReader(bytes.NewReader(buf[:n]), errReader{readErr})
	case n == len(buf): // cannot happen under MaxBytesReader: the rest is still to read
		body = io.MultiReader(bytes.NewReader(buf[:n]), r.Body)
	default:
		if flat, ok := dst.(flatDecoder); ok {
			var members [8]messages.FlatMember
			if k, ok := messages.ScanFlat(buf[:n], members[:]); ok && flat.decodeFlat(members[:k]) {
				return nil
			}
		}
		if e := checkMembers(buf[:n], dst); e != nil {
			return e
		}
		body = bytes.NewReader(buf[:n])
	}
	return decodeJSON(body, dst)
}

// checkMembers refuses a body whose top-level object names a member twice, or names one
// that is not exactly one of dst's fields. Anything else wrong with it is decodeJSON's to
// report (a refusal is made only of valid JSON: the scan skips values unchecked). It reads the keys in place, without allocating (the increments', match points'
// and metadata-carrying writes' bodies all come here); a key with escapes, or more members
// than it keeps, goes to checkMembersDecoding.
func checkMembers(data []byte, dst any) *apiError {
	names := jsonNames(reflect.TypeOf(dst))
	i := skipJSONSpace(data, 0)
	if i == len(data) || data[i] != '{' {
		return nil
	}
	i = skipJSONSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return nil
	}
	var seen [16][]byte
	n := 0
	for {
		if i == len(data) || data[i] != '"' {
			return nil
		}
		end, escaped := scanJSONString(data, i)
		if end < 0 {
			return nil
		}
		if escaped || n == len(seen) {
			return checkMembersDecoding(data, names)
		}
		key := data[i+1 : end-1]
		for _, k := range seen[:n] {
			if bytes.Equal(k, key) && json.Valid(data) {
				return badRequest("invalid_json", "request body names member %q twice", key)
			}
		}
		if names != nil && !names[string(key)] && json.Valid(data) {
			return badRequest("unknown_field", "unknown field %q", key)
		}
		seen[n] = key
		n++
		i = skipJSONSpace(data, end)
		if i == len(data) || data[i] != ':' {
			return nil
		}
		if i = skipJSONValue(data, skipJSONSpace(data, i+1)); i < 0 {
			return nil
		}
		if i = skipJSONSpace(data, i); i == len(data) || data[i] != ',' {
			return nil // '}' ends the members; anything else is decodeJSON's error
		}
		i = skipJSONSpace(data, i+1)
	}
}

func skipJSONSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// scanJSONString reads the string at data[i] (a '"'): the index after its closing quote
// (-1 when there is none), and whether it holds escapes.
func scanJSONString(data []byte, i int) (int, bool) {
	escaped := false
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped
		}
	}
	return -1, escaped
}

// skipJSONValue returns the index after the value at data[i], -1 when it does not end. It
// does not check the value: decodeJSON does.
func skipJSONValue(data []byte, i int) int {
	if i == len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		end, _ := scanJSONString(data, i)
		return end
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				end, _ := scanJSONString(data, i)
				if end < 0 {
					return -1
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	for i < len(data) && !strings.ContainsRune(",}] \t\r\n", rune(data[i])) {
		i++
	}
	return i
}

// checkMembersDecoding is checkMembers through encoding/json's tokens: keys with escapes
// are read as the names they spell.
func checkMembersDecoding(data []byte, names map[string]bool) *apiError {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	seen := make(map[string]bool, 8)
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return nil
		}
		switch {
		case seen[key]:
			return badRequest("invalid_json", "request body names member %q twice", key)
		case names != nil && !names[key]:
			return badRequest("unknown_field", "unknown field %q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// fieldNames caches jsonNames by type.
var fieldNames sync.Map // reflect.Type -> map[string]bool

// jsonNames are the member names encoding/json reads into a *struct type t, exactly as
// its fields name them; nil for any other type.
func jsonNames(t reflect.Type) map[string]bool {
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	if names, ok := fieldNames.Load(t); ok {
		return names.(map[string]bool)
	}
	names := map[string]bool{}
	var add func(reflect.Type)
	add = func(st reflect.Type) {
		for i := range st.NumField() {
			f := st.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			switch {
			case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
				add(f.Type)
			case !f.IsExported():
			case name != "":
				names[name] = true
			default:
				names[f.Name] = true
			}
		}
	}
	add(t.Elem())
	fieldNames.Store(t, names)
	return names
}

// decodeJSON decodes one JSON object from body into dst with encoding/json: unknown fields,
// trailing data and a body over maxBodyBytes (body is a MaxBytesReader) are errors.
func decodeJSON(body io.Reader, dst any) *apiError {
	dec := json.NewDecoder(body)
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

// flatDecoder is a request body that reads itself from plain members, as encoding/json
// would read them, or reports false (and is left as it was).
type flatDecoder interface {
	decodeFlat([]messages.FlatMember) bool
}

// bodyBuffers hold request bodies while decodeStrict reads them: one byte more than a
// body may have, so that a full buffer means a body cut short.
var bodyBuffers = sync.Pool{New: func() any { return new([maxBodyBytes + 1]byte) }}

// readFull reads r into buf until buf is full, EOF (nil) or another error.
func readFull(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// errReader gives err on every read: a body's read error, after its bytes.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// The answers of the hot reads (the top, one user's entry) are written without reflection,
// byte for byte what encode writes for the same values (encode_test.go compares them). An
// answer the hand-written path cannot write as encoding/json would (a time outside years
// 0–9999, metadata that is not valid JSON) goes through encode.

// topResponse is the answer of GET /v1/leaderboard/top and GET /v1/boards/{board_id}/top.
type topResponse struct {
	Board     string      `json:"board"`
	Period    string      `json:"period"`
	Version   int64       `json:"version"`
	UpdatedAt *time.Time  `json:"updated_at"`
	Entries   []entryView `json:"entries"`
}

func encodeTop(w http.ResponseWriter, resp topResponse) {
	buf := make([]byte, 0, 128+160*len(resp.Entries))
	buf = append(buf, `{"board":`...)
	buf = appendJSONString(buf, resp.Board)
	buf = append(buf, `,"period":`...)
	buf = appendJSONString(buf, resp.Period)
	buf = append(buf, `,"version":`...)
	buf = strconv.AppendInt(buf, resp.Version, 10)
	buf = append(buf, `,"updated_at":`...)
	ok := true
	if resp.UpdatedAt == nil {
		buf = append(buf, "null"...)
	} else {
		buf, ok = appendJSONTime(buf, *resp.UpdatedAt)
	}
	buf = append(buf, `,"entries":`...)
	if ok {
		buf, ok = appendEntryViews(buf, resp.Entries)
	}
	if !ok {
		encode(w, http.StatusOK, resp)
		return
	}
	writeJSON(w, append(buf, "}\n"...))
}

func encodeUser(w http.ResponseWriter, v userView) {
	buf := make([]byte, 0, 192+160*len(v.Around))
	buf = append(buf, `{"user_id":`...)
	buf = appendJSONString(buf, v.UserID)
	buf = append(buf, `,"score":`...)
	buf = strconv.AppendInt(buf, v.Score, 10)
	buf = append(buf, `,"rank":`...)
	buf = strconv.AppendInt(buf, v.Rank, 10)
	buf = append(buf, `,"updated_at":`...)
	buf, ok := appendJSONTime(buf, v.UpdatedAt)
	buf = append(buf, `,"board":`...)
	buf = appendJSONString(buf, v.Board)
	buf = append(buf, `,"period":`...)
	buf = appendJSONString(buf, v.Period)
	if ok && len(v.Metadata) > 0 {
		buf = append(buf, `,"metadata":`...)
		buf, ok = appendRawJSON(buf, v.Metadata)
	}
	if ok && len(v.Around) > 0 {
		buf = append(buf, `,"around":`...)
		buf, ok = appendEntryViews(buf, v.Around)
	}
	if !ok {
		encode(w, http.StatusOK, v)
		return
	}
	writeJSON(w, append(buf, "}\n"...))
}

func writeJSON(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// appendEntryViews appends entries as encoding/json writes a non-nil []entryView.
func appendEntryViews(dst []byte, entries []entryView) ([]byte, bool) {
	dst = append(dst, '[')
	for i, e := range entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"rank":`...)
		dst = strconv.AppendInt(dst, e.Rank, 10)
		dst = append(dst, `,"user_id":`...)
		dst = appendJSONString(dst, e.UserID)
		dst = append(dst, `,"score":`...)
		dst = strconv.AppendInt(dst, e.Score, 10)
		if e.NickName != "" {
			dst = append(dst, `,"nick_name":`...)
			dst = appendJSONString(dst, e.NickName)
		}
		dst = append(dst, `,"updated_at":`...)
		var ok bool
		if dst, ok = appendJSONTime(dst, e.UpdatedAt); !ok {
			return dst, false
		}
		if len(e.Metadata) > 0 {
			dst = append(dst, `,"metadata":`...)
			if dst, ok = appendRawJSON(dst, e.Metadata); !ok {
				return dst, false
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, ']'), true
}

// appendJSONTime appends t as time.Time's MarshalJSON writes it (RFC 3339 with nanoseconds);
// false when MarshalJSON would fail.
func appendJSONTime(dst []byte, t time.Time) ([]byte, bool) {
	dst = append(dst, '"')
	dst, err := t.AppendText(dst)
	return append(dst, '"'), err == nil
}

// appendRawJSON appends raw JSON as encoding/json writes a json.RawMessage (compacted,
// HTML characters escaped); false when it is not valid JSON.
func appendRawJSON(dst []byte, raw json.RawMessage) ([]byte, bool) {
	b, err := json.Marshal(raw)
	return append(dst, b...), err == nil
}
