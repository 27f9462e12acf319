package messages

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// ValidUserID reports whether s is a user id: 1 to 64 of [A-Za-z0-9_.:-].
func ValidUserID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// ValidEventID reports whether s is an event id: 1 to 64 printable characters (the ASCII
// space among them, as API.md allows any characters; control characters and other spaces
// are refused).
func ValidEventID(s string) bool {
	n := utf8.RuneCountInString(s)
	if n == 0 || n > 64 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// CleanNickName keeps a display name printable and at most 64 characters.
func CleanNickName(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if len(out) == 64 {
			break
		}
		if unicode.IsPrint(r) && r != '\t' {
			out = append(out, r)
		}
	}
	return string(out)
}

// Validate checks the fields every ScoreSubmitted must have.
func (c ScoreSubmitted) Validate() error {
	var errs []error
	if !ValidEventID(c.EventID) {
		errs = append(errs, errors.New("invalid event_id"))
	}
	if !ValidUserID(c.UserID) {
		errs = append(errs, errors.New("invalid user_id"))
	}
	switch c.Op {
	case "", OpAdjust, OpRemove:
		if c.Board == "" || c.Period == "" {
			errs = append(errs, errors.New("missing board or period"))
		}
		if c.Op != "" && len(c.Also) > 0 {
			errs = append(errs, fmt.Errorf("op %s takes one board", c.Op))
		}
	case OpSync:
		if c.Board != "" || c.Period != "" || c.Value != 0 || len(c.Also) > 0 || c.Metadata != nil {
			errs = append(errs, errors.New("op sync names a user only"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown op %q", c.Op))
	}
	seen := map[string]bool{c.Board + "\x00" + c.Period: true}
	for _, a := range c.Also {
		if a.Board == "" || a.Period == "" {
			errs = append(errs, errors.New("missing board or period in also"))
		}
		if seen[a.Board+"\x00"+a.Period] {
			errs = append(errs, fmt.Errorf("board %q and period %q named twice", a.Board, a.Period))
		}
		seen[a.Board+"\x00"+a.Period] = true
	}
	if c.OccurredAt.IsZero() {
		errs = append(errs, errors.New("missing occurred_at"))
	}
	if c.NickName != CleanNickName(c.NickName) {
		errs = append(errs, errors.New("invalid nick_name"))
	}
	if c.Metadata != nil && !validMetadata(c.Metadata, true) {
		errs = append(errs, errors.New("invalid metadata: want a JSON object of at most 1 KB"))
	}
	return errors.Join(errs...)
}

// ValidMetadata reports whether raw is a JSON object of at most MaxMetadataBytes that
// PostgreSQL's jsonb stores as it is: valid UTF-8, no \u0000 and no unpaired surrogate
// escapes in its strings (jsonb refuses them), and at most MaxMetadataBytes once jsonb
// writes its numbers' exponents out in digits (1e131071 is 131,072 characters there).
func ValidMetadata(raw []byte) bool { return validMetadata(raw, false) }

// validMetadata is ValidMetadata; with htmlEscaped, the bytes json.Marshal's HTML escapes
// add are not counted (\u003c, \u003e and \u0026 count as the one byte they stand for,
// \u2028 and \u2029 as three), so that a command whose metadata an earlier build
// re-encoded with them is taken as the API took it (Validate: the projector, requeued dead
// letters). The API measures what the client sent.
func validMetadata(raw []byte, htmlEscaped bool) bool {
	most := MaxMetadataBytes
	if htmlEscaped {
		most *= 6 // every byte of it escaped
	}
	if len(raw) > most || !utf8.Valid(raw) || !json.Valid(raw) {
		return false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return false
	}
	expanded, escapes, ok := jsonbExpansion(raw)
	size := len(raw) + expanded
	if htmlEscaped {
		size -= escapes
	}
	return ok && size <= MaxMetadataBytes
}

// jsonbExpansion scans valid JSON: false when a string holds an escape jsonb refuses
// (\u0000, a surrogate escape that is not a high one followed by a low one); otherwise how
// many characters jsonb's text adds, at most, when it writes the numbers' exponents out
// (each exponent's absolute value), and how many bytes the escapes json.Marshal writes for
// HTML's sake take beyond the characters they stand for (validMetadata).
func jsonbExpansion(raw []byte) (expanded, escapes int, ok bool) {
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			for i++; raw[i] != '"'; i++ {
				if raw[i] != '\\' {
					continue
				}
				i++
				if raw[i] != 'u' {
					continue
				}
				u := hex4(raw[i+1 : i+5])
				i += 4
				switch {
				case u == 0, u >= 0xDC00 && u <= 0xDFFF:
					return 0, 0, false
				case u >= 0xD800 && u <= 0xDBFF:
					if i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
						return 0, 0, false
					}
					if low := hex4(raw[i+3 : i+7]); low < 0xDC00 || low > 0xDFFF {
						return 0, 0, false
					}
					i += 6
				case u == '<', u == '>', u == '&':
					escapes += 5
				case u == 0x2028, u == 0x2029:
					escapes += 3
				}
			}
		case c == 'e' || c == 'E': // outside strings, only in a number's exponent
			i++
			if raw[i] == '+' || raw[i] == '-' {
				i++
			}
			exp := 0
			for ; i < len(raw) && raw[i] >= '0' && raw[i] <= '9'; i++ {
				exp = min(exp*10+int(raw[i]-'0'), 1<<20)
			}
			i--
			expanded = min(expanded+exp, 1<<20)
		}
	}
	return expanded, escapes, true
}

// hex4 reads four hex digits (valid JSON has them after \u).
func hex4(b []byte) int {
	n := 0
	for _, c := range b {
		n <<= 4
		switch {
		case c >= '0' && c <= '9':
			n |= int(c - '0')
		case c >= 'a' && c <= 'f':
			n |= int(c-'a') + 10
		default:
			n |= int(c-'A') + 10
		}
	}
	return n
}
