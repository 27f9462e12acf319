package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	lbhttp "github.com/openleaderboard/leaderboard/http"
)

// TestSubmitAndRead drives the service like a client: submissions, top-N, per-user
// reads, /me, unchanged answers, wait=true, and rank consistency.
func TestSubmitAndRead(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	alice, bob, carol := mintToken(t, "alice"), mintToken(t, "bob"), mintToken(t, "carol")

	r := svc.submit(t, alice, `{"score": 500}`)
	if r.status != http.StatusAccepted || r.body["status"] != "accepted" || !hasText(r.body["event_id"]) {
		t.Fatalf("submit: %d %s", r.status, r.raw)
	}
	r = svc.do(t, http.MethodPost, "/v1/scores?wait=true", bob, `{"score": 700, "event_id": "bob-1"}`)
	if r.status != http.StatusOK || r.body["status"] != "applied" || num(r.body["score"]) != 700 || num(r.body["rank"]) != 1 {
		t.Fatalf("submit wait=true: %d %s", r.status, r.raw)
	}
	svc.submit(t, carol, `{"score": 600}`)

	eventually(t, 20*time.Second, func() string {
		r := svc.do(t, http.MethodGet, "/v1/leaderboard/top?limit=10", alice, "")
		if r.status != 200 {
			return r.raw
		}
		got := []string{}
		for _, e := range r.body["entries"].([]any) {
			m := e.(map[string]any)
			got = append(got, fmt.Sprintf("%d:%s:%d:%s", num(m["rank"]), m["user_id"], num(m["score"]), m["nick_name"]))
		}
		want := "1:bob:700:Player bob 2:carol:600:Player carol 3:alice:500:Player alice"
		if strings.Join(got, " ") != want {
			return strings.Join(got, " ")
		}
		if r.body["board"] != "global" || num(r.body["version"]) < 1 || r.body["updated_at"] == nil {
			return r.raw
		}
		return ""
	})

	r = svc.do(t, http.MethodGet, "/v1/leaderboard/users/carol", alice, "")
	if r.status != 200 || num(r.body["rank"]) != 2 || num(r.body["score"]) != 600 || !hasText(r.body["updated_at"]) {
		t.Fatalf("user carol: %d %s", r.status, r.raw)
	}
	r = svc.do(t, http.MethodGet, "/v1/leaderboard/me", alice, "")
	if r.status != 200 || r.body["user_id"] != "alice" || num(r.body["rank"]) != 3 {
		t.Fatalf("me: %d %s", r.status, r.raw)
	}
	r = svc.do(t, http.MethodGet, "/v1/leaderboard/users/nobody", alice, "")
	if r.status != 404 || r.body["error_code"] != "not_found" {
		t.Fatalf("unknown user: %d %s", r.status, r.raw)
	}
	r = svc.do(t, http.MethodGet, "/v1/leaderboard/top?limit=2", alice, "")
	if len(r.body["entries"].([]any)) != 2 {
		t.Fatalf("limit=2: %s", r.raw)
	}

	// Not beating the stored best: 200 unchanged from Redis, nothing published.
	before := env.count(`SELECT count(*) FROM score_requests`)
	r = svc.submit(t, bob, `{"score": 650}`)
	if r.status != 200 || r.body["status"] != "unchanged" || num(r.body["score"]) != 700 || num(r.body["rank"]) != 1 {
		t.Fatalf("unchanged: %d %s", r.status, r.raw)
	}
	if after := env.count(`SELECT count(*) FROM score_requests`); after != before {
		t.Fatalf("unchanged submission was published: %d -> %d requests", before, after)
	}

	// The pipeline's series move.
	metricsShow(t, svc,
		`leaderboard_http_requests_total{method="POST",route="/v1/scores",status="202"}`,
		`leaderboard_score_submissions_total{board="global",outcome="unchanged"} 1`,
		`leaderboard_projector_events_total{board="global",result="applied"} 3`,
		`leaderboard_outbox_batch_size_count`,
		`leaderboard_projection_lag_seconds_count 3`,
	)

	// A server token submits for any user.
	srv := mintToken(t, "game-server-1", "server")
	r = svc.do(t, http.MethodPost, "/v1/scores?wait=true", srv, `{"score": 800, "user_id": "alice"}`)
	if r.status != 200 || r.body["user_id"] != "alice" || num(r.body["rank"]) != 1 {
		t.Fatalf("server submit: %d %s", r.status, r.raw)
	}
}

// TestTiesRankFirstReacherHigher: equal scores rank by who reached them first, and the
// top-N and the per-user read agree.
func TestTiesRankFirstReacherHigher(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	users := []string{"zed", "amy", "mid"} // reach order; lexical order differs on purpose
	for _, u := range users {
		r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", mintToken(t, u), `{"score": 1000}`)
		if r.status != 200 {
			t.Fatalf("submit %s: %d %s", u, r.status, r.raw)
		}
	}
	tok := mintToken(t, "reader")
	eventually(t, 20*time.Second, func() string {
		r := svc.do(t, http.MethodGet, "/v1/leaderboard/top", tok, "")
		var got []string
		for _, e := range r.body["entries"].([]any) {
			got = append(got, e.(map[string]any)["user_id"].(string))
		}
		if strings.Join(got, ",") != "zed,amy,mid" {
			return strings.Join(got, ",")
		}
		return ""
	})
	for i, u := range users {
		r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/"+u, tok, "")
		if num(r.body["rank"]) != int64(i+1) {
			t.Errorf("%s: rank %d, want %d (%s)", u, num(r.body["rank"]), i+1, r.raw)
		}
	}
	// Reaching a higher score later still moves ahead.
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", mintToken(t, "mid"), `{"score": 1001}`); r.status != 200 {
		t.Fatalf("mid improving: %d %s", r.status, r.raw)
	}
	r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/mid", tok, "")
	if num(r.body["rank"]) != 1 {
		t.Fatalf("mid after improving: %s", r.raw)
	}
}

// TestBadInput: every malformed request gets the documented error and publishes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	player := mintToken(t, "player")
	expired := signToken(t, lbhttp.Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "player", ExpiresAt: jwt.NewNumericDate(time.Now().Add(-time.Minute))}})
	noExp := signToken(t, lbhttp.Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "player"}})
	badSub := signToken(t, lbhttp.Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "bad user!", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	wrongKey, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, lbhttp.Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "player", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}}).SignedString([]byte("another-secret-0123456789"))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, lbhttp.Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "player", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}}).SignedString(jwt.UnsafeAllowNoneSignatureType)

	cases := []struct {
		name, tok, body string
		status          int
		code            string
	}{
		{"malformed json", player, `{"score": `, 400, "invalid_json"},
		{"not an object", player, `[1,2]`, 400, "invalid_json"},
		{"empty body", player, ``, 400, "invalid_json"},
		{"trailing data", player, `{"score": 1} {"score": 2}`, 400, "invalid_json"},
		{"unknown field", player, `{"score": 1, "bonus": 5}`, 400, "unknown_field"},
		{"missing score", player, `{"event_id": "x"}`, 400, "invalid_score"},
		{"null score", player, `{"score": null}`, 400, "invalid_score"},
		{"fractional score", player, `{"score": 10.5}`, 400, "invalid_score"},
		{"exponent score", player, `{"score": 1e3}`, 400, "invalid_score"},
		{"string score", player, `{"score": "10"}`, 400, "invalid_score"},
		{"negative score", player, `{"score": -1}`, 400, "value_out_of_range"},
		{"score over 2^53", player, `{"score": 9007199254740992}`, 400, "value_out_of_range"},
		{"score over int64", player, `{"score": 99999999999999999999}`, 400, "invalid_score"},
		{"empty event id", player, `{"score": 1, "event_id": ""}`, 400, "invalid_event_id"},
		{"long event id", player, `{"score": 1, "event_id": "` + strings.Repeat("e", 65) + `"}`, 400, "invalid_event_id"},
		{"bad user id", mintToken(t, "srv", "server"), `{"score": 1, "user_id": "no spaces"}`, 400, "invalid_user_id"},
		{"oversized body", player, `{"score": 1, "event_id": "` + strings.Repeat("x", 5000) + `"}`, 400, "body_too_large"},
		{"no token", "", `{"score": 1}`, 401, "unauthorized"},
		{"garbage token", "abc.def.ghi", `{"score": 1}`, 401, "unauthorized"},
		{"expired token", expired, `{"score": 1}`, 401, "unauthorized"},
		{"token without exp", noExp, `{"score": 1}`, 401, "unauthorized"},
		{"token with bad sub", badSub, `{"score": 1}`, 401, "unauthorized"},
		{"token signed with another key", wrongKey, `{"score": 1}`, 401, "unauthorized"},
		{"alg none", none, `{"score": 1}`, 401, "unauthorized"},
		{"player submits for someone else", player, `{"score": 1, "user_id": "victim"}`, 403, "forbidden"},
	}
	for _, c := range cases {
		r := svc.submit(t, c.tok, c.body)
		if r.status != c.status || r.body["error_code"] != c.code || !hasText(r.body["message"]) {
			t.Errorf("%s: got %d %s, want %d %s", c.name, r.status, r.raw, c.status, c.code)
		}
	}
	reads := []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/leaderboard/top?limit=0", 400, "invalid_limit"},
		{"/v1/leaderboard/top?limit=101", 400, "invalid_limit"},
		{"/v1/leaderboard/top?limit=ten", 400, "invalid_limit"},
		{"/v1/leaderboard/users/bad%20id", 400, "invalid_user_id"},
	}
	for _, c := range reads {
		r := svc.do(t, http.MethodGet, c.path, player, "")
		if r.status != c.status || r.body["error_code"] != c.code {
			t.Errorf("GET %s: got %d %s", c.path, r.status, r.raw)
		}
	}
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/top", "", ""); r.status != 401 {
		t.Errorf("read without token: %d", r.status)
	}
	if n := env.count(`SELECT count(*) FROM score_requests`); n != 0 {
		t.Fatalf("bad input published %d commands", n)
	}
	if n := env.count(`SELECT count(*) FROM "watermill_score_commands_0"`) + env.count(`SELECT count(*) FROM "watermill_score_commands_1"`); n != 0 {
		t.Fatalf("bad input reached the outbox: %d rows", n)
	}
}

// TestIdempotentRetries: the same event_id and body is answered as the first time and
// applied once, even when sent concurrently; a different body is 409.
func TestIdempotentRetries(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	tok := mintToken(t, "retrier")

	var wg sync.WaitGroup
	statuses := make([]int, 20)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = svc.submit(t, tok, `{"score": 42, "event_id": "evt-42"}`).status
		}()
	}
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusAccepted {
			t.Fatalf("retry %d: status %d, want 202", i, s)
		}
	}
	eventually(t, 20*time.Second, func() string { // applied: in PostgreSQL, then in Redis
		if n := env.count(`SELECT count(*) FROM score_history WHERE event_id = 'evt-42'`); n != 1 {
			return fmt.Sprintf("history rows %d", n)
		}
		if r := svc.do(t, http.MethodGet, "/v1/leaderboard/me", tok, ""); r.status != 200 {
			return r.raw
		}
		return ""
	})
	// After it is applied, the same retry is still answered as accepted, not "unchanged".
	if r := svc.submit(t, tok, `{"score": 42, "event_id": "evt-42"}`); r.status != 202 || r.body["event_id"] != "evt-42" {
		t.Fatalf("retry after apply: %d %s", r.status, r.raw)
	}
	for _, body := range []string{`{"score": 43, "event_id": "evt-42"}`, `{"score": 41, "event_id": "evt-42"}`} {
		r := svc.submit(t, tok, body)
		if r.status != http.StatusConflict || r.body["error_code"] != "event_id_conflict" || r.body["event_id"] != "evt-42" {
			t.Fatalf("reused event id with %s: %d %s", body, r.status, r.raw)
		}
	}
	r := svc.do(t, http.MethodGet, "/v1/leaderboard/me", tok, "")
	if num(r.body["score"]) != 42 {
		t.Fatalf("score after retries: %s", r.raw)
	}
	if n := env.count(`SELECT count(*) FROM score_requests`); n != 1 {
		t.Fatalf("requests recorded: %d, want 1", n)
	}
	if n := env.count(`SELECT version FROM board_entries WHERE user_id = 'retrier'`); n != 1 {
		t.Fatalf("entry version %d, want 1 (applied once)", n)
	}
}

// TestGracefulShutdown: cancelling run's context stops every role without error, and a
// restart on the same state serves the same data.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	tok := mintToken(t, "keeper")
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", tok, `{"score": 9}`); r.status != 200 {
		t.Fatalf("submit: %d %s", r.status, r.raw)
	}
	svc.stop(t)
	if _, err := http.Get(svc.base + "/healthz"); err == nil {
		t.Fatal("HTTP still answers after shutdown")
	}
	svc = env.start(nil)
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/me", tok, ""); r.status != 200 || num(r.body["score"]) != 9 {
		t.Fatalf("after restart: %d %s", r.status, r.raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := healthcheck(ctx, mustConfig(t, env)); err != nil {
		t.Fatalf("healthcheck subcommand: %v", err)
	}
}

// TestRolesInSeparateProcesses: the compose shape, an API process and a pipeline process
// (relay and projector) sharing PostgreSQL, Redis and Kafka; the pipeline process serves
// the operational endpoints.
func TestRolesInSeparateProcesses(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	pipeline := env.start(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker, "LEADERBOARD_ROLES": "relay,projector"})
	api := env.start(map[string]string{"LEADERBOARD_KAFKA_BROKERS": broker, "LEADERBOARD_ROLES": "api", "LEADERBOARD_HTTP_ADDR": "127.0.0.1:" + freePort(t)})
	if r := api.do(t, http.MethodPost, "/v1/scores?wait=true", mintToken(t, "split"), `{"score": 77}`); r.status != 200 || r.body["status"] != "applied" {
		t.Fatalf("submit through split roles: %d %s", r.status, r.raw)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if r := pipeline.do(t, http.MethodGet, path, "", ""); r.status != 200 {
			t.Errorf("pipeline process %s: %d %s", path, r.status, r.raw)
		}
	}
	metricsShow(t, pipeline, `leaderboard_projector_events_total{board="global",result="applied"} 1`)
	if r := pipeline.do(t, http.MethodPost, "/v1/scores", mintToken(t, "split"), `{"score": 1}`); r.status != 404 {
		t.Errorf("pipeline process serves the API: %d", r.status)
	}
}
