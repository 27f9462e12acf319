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

// ValidEventID reports whether s is an event id: 1 to 64 printable characters.
func ValidEventID(s string) bool {
	n := utf8.RuneCountInString(s)
	if n == 0 || n > 64 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
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
	if c.Metadata != nil && !ValidMetadata(c.Metadata) {
		errs = append(errs, errors.New("invalid metadata: want a JSON object of at most 1 KB"))
	}
	return errors.Join(errs...)
}

// ValidMetadata reports whether raw is a JSON object of at most MaxMetadataBytes.
func ValidMetadata(raw []byte) bool {
	if len(raw) > MaxMetadataBytes || !json.Valid(raw) {
		return false
	}
	var obj map[string]json.RawMessage
	return json.Unmarshal(raw, &obj) == nil && obj != nil
}
