package main

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestDegradedUnknownMatchIs404: "A match without any point is 404 unknown_board";
// the PostgreSQL fallback must answer it the same way as Redis does, marked degraded (the
// 404 went without the header).
func TestDegradedUnknownMatchIs404(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newProxy(t, testRedis)
	svc := env.start(map[string]string{"LEADERBOARD_REDIS_URL": "redis://" + px.addr() + "/0"})
	reader := mintToken(t, "reader")
	paths := []string{"/v1/match-leaderboard/never-played/score", "/v1/boards/match:never-played/top"}
	for _, p := range paths {
		if r := svc.do(t, http.MethodGet, p, reader, ""); r.status != 404 {
			t.Fatalf("%s with Redis up: %d %s", p, r.status, r.raw)
		}
	}
	px.setDown(true)
	for _, p := range paths {
		if r := svc.do(t, http.MethodGet, p, reader, ""); r.status != 404 || r.header.Get("X-Leaderboard-Degraded") != "redis-unavailable" {
			t.Errorf("%s while degraded (%q): %d %s, want 404 unknown_board, marked degraded", p, r.header.Get("X-Leaderboard-Degraded"), r.status, r.raw)
		}
	}
}

// TestDegradedMatchOfBannedPlayerAgrees: a match whose only player is then banned
// still exists (it had a point), and Redis answers its top as an empty board; the
// PostgreSQL fallback answers the same state the same way (it answered 404 unknown_board:
// the match's existence was read from its shown entries only; found by a review), and so
// does a read of the match once Redis let it expire (loaded again from PostgreSQL).
func TestDegradedMatchOfBannedPlayerAgrees(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newProxy(t, testRedis)
	svc := env.start(map[string]string{"LEADERBOARD_REDIS_URL": "redis://" + px.addr() + "/0"})
	srv, reader := mintToken(t, "game", "server"), mintToken(t, "reader")
	if r := svc.do(t, http.MethodPost, "/v1/matches/r20-m/users/mallory/point?wait=true", srv, `{"point": 3}`); r.status != 200 {
		t.Fatalf("point: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodPost, "/admin/users/mallory/ban?wait=true", mintToken(t, "ops", "admin"), `{"reason": "aimbot"}`); r.status != 200 {
		t.Fatalf("ban: %d %s", r.status, r.raw)
	}
	const path = "/v1/boards/match:r20-m/top"
	var up response
	eventually(t, 10*time.Second, func() string {
		up = svc.do(t, http.MethodGet, path, reader, "")
		if up.status == 200 && len(up.body["entries"].([]any)) == 0 {
			return ""
		}
		return up.raw
	})
	px.setDown(true)
	down := svc.do(t, http.MethodGet, path, reader, "")
	if down.status != up.status || down.header.Get("X-Leaderboard-Degraded") != "redis-unavailable" {
		t.Errorf("%s: from Redis %d %s; while degraded (%q) %d %s: the same state answered differently",
			path, up.status, up.raw, down.header.Get("X-Leaderboard-Degraded"), down.status, down.raw)
	}
	px.setDown(false)
	if keys, err := env.rdb.Keys(context.Background(), env.prefix+":{match:r20-m}:*").Result(); err != nil || len(keys) == 0 {
		t.Fatalf("the match's keys in Redis: %v, %v", keys, err)
	} else if err := env.rdb.Del(context.Background(), keys...).Err(); err != nil { // as if it expired
		t.Fatal(err)
	}
	if again := svc.do(t, http.MethodGet, path, reader, ""); again.status != up.status {
		t.Errorf("%s once Redis let the match expire: %d %s, want %d", path, again.status, again.raw, up.status)
	}
}
