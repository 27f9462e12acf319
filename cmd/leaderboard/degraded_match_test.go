package main

import (
	"net/http"
	"testing"
)

// TestDegradedUnknownMatchIs404: "A match without any point is 404 unknown_board";
// the PostgreSQL fallback must answer it the same way as Redis does.
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
		if r := svc.do(t, http.MethodGet, p, reader, ""); r.status != 404 {
			t.Errorf("%s while degraded (%s): %d %s, want 404 unknown_board", p, r.header.Get("X-Leaderboard-Degraded"), r.status, r.raw)
		}
	}
}
