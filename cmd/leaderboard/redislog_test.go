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

// TestRedisLogKeepsDistinctLinesOfOneFormat: go-redis v9.23 logs most of its
// lines (its maintenance notifications, circuit breaker, handoffs, relaxed timeouts:
// about 80 call sites) as Printf(ctx, "%s", text): a throttle keyed on the format took two
// different lines within redisLogEvery for one, and dropped the second.
func TestRedisLogKeepsDistinctLinesOfOneFormat(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	l := newRedisLog(slog.New(slog.NewJSONHandler(&out, nil)), func() time.Time { return now })
	l.Printf(context.Background(), "%s", "circuit breaker opened for endpoint redis-1:6379 after 5 failures")
	now = now.Add(time.Second)
	l.Printf(context.Background(), "%s", "conn[42] marked for handoff to redis-2:6379")
	if !strings.Contains(out.String(), "marked for handoff") {
		t.Errorf("a different go-redis line within %s of another was dropped (same format %q):\n%s", redisLogEvery, "%s", out.String())
	}
}
