package main

import (
	"net/http"
	"testing"
)

// TestDegradedReadsHideBannedUsers: with Redis unreachable, reads come from
// PostgreSQL and must still leave a banned user out ("Banned users are left out of every
// read"): their own entry is 404 as it is from Redis.
func TestDegradedReadsHideBannedUsers(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newProxy(t, testRedis)
	svc := env.start(map[string]string{"LEADERBOARD_REDIS_URL": "redis://" + px.addr() + "/0"})
	mallory, reader := mintToken(t, "mallory"), mintToken(t, "reader")
	for tok, body := range map[string]string{mallory: `{"score": 900}`, mintToken(t, "alice"): `{"score": 100}`} {
		if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", tok, body); r.status != 200 {
			t.Fatalf("submit: %d %s", r.status, r.raw)
		}
	}
	if r := svc.do(t, http.MethodPost, "/admin/users/mallory/ban?wait=true", mintToken(t, "ops", "admin"), `{"reason": "aimbot"}`); r.status != 200 {
		t.Fatalf("ban: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/mallory", reader, ""); r.status != 404 {
		t.Fatalf("banned user from Redis: %d %s", r.status, r.raw)
	}
	px.setDown(true)
	r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/mallory", reader, "")
	if r.status != 404 {
		t.Errorf("banned user while degraded (%s): %d %s, want 404 as from Redis", r.header.Get("X-Leaderboard-Degraded"), r.status, r.raw)
	}
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/alice", reader, ""); r.status != 200 || num(r.body["rank"]) != 1 {
		t.Errorf("alice while degraded: %d %s, want rank 1", r.status, r.raw)
	}
}
