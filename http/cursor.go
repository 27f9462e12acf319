package http

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"

	"github.com/openleaderboard/leaderboard/storage"
)

// errBadCursor is a cursor that was not issued for this board and period, or was altered.
var errBadCursor = errors.New("invalid cursor")

// cursors issue and check page cursors: a position in rank order (sort key and member:
// value, reach order, user) with the board and period it belongs to, signed with a key
// derived from the JWT secret, so a client can neither forge one nor carry it to another
// board or period.
type cursors struct{ key []byte }

func newCursors(secret string) cursors {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("leaderboard page cursors"))
	return cursors{key: m.Sum(nil)}
}

type cursorBody struct {
	Board  string `json:"b"`
	Period string `json:"p"`
	Sort   int64  `json:"s"`
	Member string `json:"m"`
}

func (c cursors) sign(payload string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// issue returns the cursor of the position after which the next page starts.
func (c cursors) issue(board, period string, p storage.Position) string {
	raw, _ := json.Marshal(cursorBody{Board: board, Period: period, Sort: p.SortKey, Member: p.Member})
	payload := base64.RawURLEncoding.EncodeToString(raw)
	return payload + "." + c.sign(payload)
}

// read checks a cursor against the board and period it is used with.
func (c cursors) read(cursor, board, period string) (storage.Position, error) {
	body, err := c.open(cursor, board)
	if err != nil || body.Period != period {
		return storage.Position{}, errBadCursor
	}
	return storage.Position{SortKey: body.Sort, Member: body.Member}, nil
}

// periodOf is the period a cursor of board was issued for.
func (c cursors) periodOf(cursor, board string) (string, error) {
	body, err := c.open(cursor, board)
	return body.Period, err
}

// open checks a cursor's signature and board and returns what it holds.
func (c cursors) open(cursor, board string) (cursorBody, error) {
	payload, mac, ok := strings.Cut(cursor, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(c.sign(payload))) {
		return cursorBody{}, errBadCursor
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	var body cursorBody
	if err != nil || json.Unmarshal(raw, &body) != nil || body.Board != board {
		return cursorBody{}, errBadCursor
	}
	return body, nil
}
