package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// FlatMember is one member of a flat JSON object (ScanFlat): its key, and its value as
// written, a string with its quotes or an integer.
type FlatMember struct {
	Key, Value []byte
}

// IsString reports whether the value is a string (its content is Value[1:len-1]).
func (m FlatMember) IsString() bool { return m.Value[0] == '"' }

// ScanFlat reads data as one JSON object whose members are all plain, into out: keys and
// string values of printable ASCII other than '"' and '\' (no escapes), integer values
// (-?(0|[1-9][0-9]*)), JSON whitespace between tokens and after the object.
// It returns the members read and true, or false at anything else (more members than out
// holds, or a key twice, too); the caller then decodes data with encoding/json, which
// reads every object ScanFlat reads to the same values and gives the right error for the
// rest (the API refuses a key twice before it: decodeStrict). This is the
// hot path's decode: the API's score bodies and the projector's commands, without
// reflection.
func ScanFlat(data []byte, out []FlatMember) (int, bool) {
	i := skipSpace(data, 0)
	if i == len(data) || data[i] != '{' {
		return 0, false
	}
	i = skipSpace(data, i+1)
	n := 0
	if i < len(data) && data[i] == '}' {
		return 0, skipSpace(data, i+1) == len(data)
	}
	for {
		key, next, ok := plainString(data, i)
		if !ok || n == len(out) {
			return 0, false
		}
		i = skipSpace(data, next)
		if i == len(data) || data[i] != ':' {
			return 0, false
		}
		i = skipSpace(data, i+1)
		var value []byte
		if i < len(data) && data[i] == '"' {
			value, next, ok = plainString(data, i)
		} else {
			value, next, ok = plainInteger(data, i)
		}
		if !ok {
			return 0, false
		}
		key = key[1 : len(key)-1]
		for _, m := range out[:n] {
			if bytes.Equal(m.Key, key) {
				return 0, false
			}
		}
		out[n] = FlatMember{Key: key, Value: value}
		n++
		i = skipSpace(data, next)
		if i == len(data) {
			return 0, false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return n, skipSpace(data, i+1) == len(data)
		default:
			return 0, false
		}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a string without escapes from data[i] (a '"'): the token, quotes
// included, and the index after it.
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i == len(data) || data[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i : j+1], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// plainInteger reads -?(0|[1-9][0-9]*) from data[i] (a fraction or an exponent after it
// is not the ',' or '}' ScanFlat wants next).
func plainInteger(data []byte, i int) ([]byte, int, bool) {
	j := i
	if j < len(data) && data[j] == '-' {
		j++
	}
	start := j
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		j++
	}
	if j == start || (data[start] == '0' && j-start > 1) {
		return nil, 0, false
	}
	return data[i:j], j, true
}

// DecodeScoreSubmitted decodes a ScoreSubmitted as encoding/json's Decoder with
// DisallowUnknownFields decodes the first JSON value of payload: the same values, or an
// error (its text may differ from the Decoder's only where the fast path reads nothing).
func DecodeScoreSubmitted(payload []byte) (ScoreSubmitted, error) {
	var cmd ScoreSubmitted
	if decodeFlatScoreSubmitted(payload, &cmd) {
		return cmd, nil
	}
	cmd = ScoreSubmitted{}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cmd); err != nil {
		return ScoreSubmitted{}, fmt.Errorf("decode ScoreSubmitted: %w", err)
	}
	return cmd, nil
}

// decodeFlatScoreSubmitted decodes the commands ScanFlat reads whole (no also, no
// metadata: those go through encoding/json) into cmd, or reports false.
func decodeFlatScoreSubmitted(payload []byte, cmd *ScoreSubmitted) bool {
	var members [10]FlatMember
	n, ok := ScanFlat(payload, members[:])
	if !ok {
		return false
	}
	for _, m := range members[:n] {
		if string(m.Key) == "value" {
			v, err := strconv.ParseInt(string(m.Value), 10, 64) // a string fails
			if err != nil {
				return false
			}
			cmd.Value = v
			continue
		}
		if !m.IsString() {
			return false
		}
		s := m.Value[1 : len(m.Value)-1]
		switch string(m.Key) {
		case "op":
			cmd.Op = string(s)
		case "event_id":
			cmd.EventID = string(s)
		case "board":
			cmd.Board = string(s)
		case "period":
			cmd.Period = string(s)
		case "user_id":
			cmd.UserID = string(s)
		case "nick_name":
			cmd.NickName = string(s)
		case "occurred_at":
			var t time.Time
			if t.UnmarshalJSON(m.Value) != nil {
				return false
			}
			cmd.OccurredAt = t
		default:
			return false
		}
	}
	return true
}

// EncodeScoreSubmitted is marshal(cmd), written without reflection for the commands the
// fast path decodes (no also, no metadata, strings of printable ASCII other than '"' and
// '\', which encoding/json writes as they are); any other goes through marshal.
func EncodeScoreSubmitted(cmd ScoreSubmitted) ([]byte, error) {
	if len(cmd.Also) > 0 || len(cmd.Metadata) > 0 {
		return marshal(cmd)
	}
	buf := make([]byte, 0, 160+len(cmd.EventID)+len(cmd.Board)+len(cmd.Period)+len(cmd.UserID)+len(cmd.NickName))
	buf = append(buf, '{')
	if cmd.Op != "" {
		buf = append(buf, `"op":`...)
		if buf = appendPlain(buf, cmd.Op); buf == nil {
			return marshal(cmd)
		}
		buf = append(buf, ',')
	}
	for _, f := range [...]struct{ key, value string }{
		{`"event_id":`, cmd.EventID}, {`,"board":`, cmd.Board}, {`,"period":`, cmd.Period}, {`,"user_id":`, cmd.UserID},
	} {
		buf = append(buf, f.key...)
		if buf = appendPlain(buf, f.value); buf == nil {
			return marshal(cmd)
		}
	}
	if cmd.NickName != "" {
		buf = append(buf, `,"nick_name":`...)
		if buf = appendPlain(buf, cmd.NickName); buf == nil {
			return marshal(cmd)
		}
	}
	buf = append(buf, `,"value":`...)
	buf = strconv.AppendInt(buf, cmd.Value, 10)
	buf = append(buf, `,"occurred_at":`...)
	t, err := cmd.OccurredAt.MarshalJSON()
	if err != nil {
		return marshal(cmd) // its error, as encoding/json words it
	}
	buf = append(buf, t...)
	return append(buf, '}'), nil
}

// marshal is json.Marshal(cmd) without its HTML escapes: metadata travels as the API
// measured it against MaxMetadataBytes. json.Marshal writes each '<', '>' and '&' in it as
// \u003c, \u003e and \u0026 and each U+2028 and U+2029 as \u2028 and \u2029, up to six
// times the bytes, and the projector refused what the API had accepted: 202, then a dead
// letter. (Strings of the command's own fields still get \u2028 and \u2029: encoding/json
// escapes them there whatever it is told; each field's bound is not in bytes.)
func marshal(cmd ScoreSubmitted) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(cmd); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// appendPlain appends s quoted when marshal writes it as it is, or returns nil.
func appendPlain(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return nil
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}
