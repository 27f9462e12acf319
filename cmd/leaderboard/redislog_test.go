package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRedisLogIsJSONAndThrottled: go-redis's lines land in the JSON log as warnings, one
// a format per redisLogEvery, the next one counting those left out.
func TestRedisLogIsJSONAndThrottled(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	l := newRedisLog(slog.New(slog.NewJSONHandler(&out, nil)), func() time.Time { return now })
	for range 5 {
		l.Printf(context.Background(), "redis: dial %s failed", "127.0.0.1:6379")
		now = now.Add(time.Second)
	}
	l.Printf(context.Background(), "other %d", 1)
	now = now.Add(redisLogEvery)
	l.Printf(context.Background(), "redis: dial %s failed", "127.0.0.1:6379")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), out.String())
	}
	var last struct {
		Level, Msg, Line string
		Skipped          int `json:"like_it_since_last"`
	}
	if err := json.Unmarshal([]byte(lines[2]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Level != "WARN" || last.Msg != "redis client" || last.Skipped != 4 || last.Line != "redis: dial 127.0.0.1:6379 failed" {
		t.Errorf("third line %s, want a warning naming the dial and 4 left out", lines[2])
	}
}
