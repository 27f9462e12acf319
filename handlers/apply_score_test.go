package handlers

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
)

// TestApplyScoreRejectsPermanently: messages that can never apply fail with a
// PermanentError before touching any store (the stores here are nil).
func TestApplyScoreRejectsPermanently(t *testing.T) {
	a := NewApplyScore(nil, nil, nil, ApplyScoreConfig{Boards: configs.DefaultBoards()}, nil, slog.New(slog.DiscardHandler))
	defer a.Close()
	valid := messages.ScoreSubmitted{EventID: "e1", Board: "global", Period: "all_time", UserID: "u1", Value: 10, OccurredAt: time.Now()}
	with := func(f func(*messages.ScoreSubmitted)) []byte {
		c := valid
		f(&c)
		b, _ := json.Marshal(c)
		return b
	}
	cases := map[string][]byte{
		"not json":         []byte(`{"event_id":`),
		"not utf-8":        {0xff, 0xfe},
		"unknown field":    []byte(`{"event_id":"e1","board":"global","period":"all_time","user_id":"u1","value":1,"occurred_at":"2026-01-01T00:00:00Z","extra":1}`),
		"string value":     []byte(`{"event_id":"e1","board":"global","period":"all_time","user_id":"u1","value":"1","occurred_at":"2026-01-01T00:00:00Z"}`),
		"unknown board":    with(func(c *messages.ScoreSubmitted) { c.Board = "nope" }),
		"negative value":   with(func(c *messages.ScoreSubmitted) { c.Value = -1 }),
		"value over 2^53":  with(func(c *messages.ScoreSubmitted) { c.Value = configs.MaxExactScore + 1 }),
		"bad user id":      with(func(c *messages.ScoreSubmitted) { c.UserID = "a b" }),
		"missing event id": with(func(c *messages.ScoreSubmitted) { c.EventID = "" }),
		"missing time":     with(func(c *messages.ScoreSubmitted) { c.OccurredAt = time.Time{} }),
	}
	for name, payload := range cases {
		err := a.Handle(message.NewMessage("m", payload))
		if err == nil || !IsPermanent(err) {
			t.Errorf("%s: got %v, want a permanent error", name, err)
		}
	}
	if _, err := a.decode(with(func(*messages.ScoreSubmitted) {})); err != nil {
		t.Fatalf("valid command rejected: %v", err)
	}
}
