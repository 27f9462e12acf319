package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/openleaderboard/leaderboard/messages"
)

// trustBoards is a boards file for the trust tests: points with a cooldown per action,
// a bounded best board with a rate limit of its own, and the global board.
const trustBoards = `{"boards": [
	{"id": "global", "operator": "best", "period": "all_time"},
	{"id": "points", "operator": "incr", "period": "all_time", "max_delta": 100, "action_cooldown": 30},
	{"id": "arena", "operator": "best", "period": "all_time", "min_value": 0, "max_value": 1000, "rate_limit": "3/60s"},
	{"id": "daily", "operator": "incr", "period": "daily", "max_delta": 1000, "action_cooldown": 60}
]}`

func trustEnv(t *testing.T) (*testEnv, map[string]string) {
	t.Helper()
	env := newTestEnv(t)
	file := filepath.Join(t.TempDir(), "boards.json")
	if err := os.WriteFile(file, []byte(trustBoards), 0o600); err != nil {
		t.Fatal(err)
	}
	return env, map[string]string{"LEADERBOARD_BOARDS_FILE": file}
}

const signingSecret = "test-signing-secret-0123456789"

// signed is an increment body signed with secret (over the fields as sent).
func signed(secret, user string, delta int, event, ts string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%s|%d|%s|%s", user, delta, event, ts)
	return fmt.Sprintf(`{"user_id": %q, "delta": %d, "event_id": %q, "timestamp": %q, "signature": %q}`, user, delta, event, ts, hex.EncodeToString(mac.Sum(nil)))
}

// TestSignedIncrements: with LEADERBOARD_SIGNING_SECRET set, an increment needs a valid
// signature and a timestamp within 60 s of the server's clock (both ways); a captured
// request replayed inside the window is answered as the first time and adds nothing, one
// with another delta is a conflict, and outside the window it is refused.
func TestSignedIncrements(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	vars["LEADERBOARD_SIGNING_SECRET"] = signingSecret
	clock := &testClock{}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock.set(now)
	svc := env.startWith(vars, clock.now)
	tok, admin := mintToken(t, "sig"), mintToken(t, "ops", "admin")
	ts := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	post := func(body string) response {
		t.Helper()
		return svc.do(t, http.MethodPost, "/v1/scores/increment", tok, body)
	}
	score := func() int64 {
		t.Helper()
		return num(svc.do(t, http.MethodGet, "/v1/boards/points/users/sig", tok, "").body["score"])
	}

	captured := signed(signingSecret, "sig", 5, "s-1", ts(-10*time.Second))
	if r := svc.do(t, http.MethodPost, "/v1/scores/increment?wait=true", tok, captured); r.status != 200 || num(r.body["new_score"]) != 5 {
		t.Fatalf("a signed increment: %d %s", r.status, r.raw)
	}
	for _, c := range []struct {
		name, body, code string
		status           int
	}{
		{"no signature", fmt.Sprintf(`{"user_id": "sig", "delta": 5, "event_id": "s-2", "timestamp": %q}`, ts(0)), "invalid_signature", 401},
		{"wrong secret", signed("another-secret-0123456789", "sig", 5, "s-2", ts(0)), "invalid_signature", 401},
		{"another delta", strings.Replace(signed(signingSecret, "sig", 5, "s-2", ts(0)), `"delta": 5`, `"delta": 50`, 1), "invalid_signature", 401},
		{"upper-case hex", strings.ToUpper(signed(signingSecret, "sig", 5, "s-2", ts(0))), "", 0},
		{"61 s old", signed(signingSecret, "sig", 5, "s-2", ts(-61*time.Second)), "stale_timestamp", 401},
		{"61 s ahead", signed(signingSecret, "sig", 5, "s-2", ts(61*time.Second)), "stale_timestamp", 401},
	} {
		if c.name == "upper-case hex" { // the whole body upper-cased: only the signature's case matters here
			body := signed(signingSecret, "sig", 5, "s-2", ts(0))
			i := strings.Index(body, `"signature": "`) + len(`"signature": "`)
			c.body, c.code, c.status = body[:i]+strings.ToUpper(body[i:]), "invalid_signature", 401
		}
		if r := post(c.body); r.status != c.status || r.body["error_code"] != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.raw, c.status, c.code)
		}
	}
	// Inside the window a replay is the same request: answered as the first time.
	if r := post(captured); r.status != 202 || r.body["processed_event_id"] != "s-1" {
		t.Errorf("replay inside the window: %d %s", r.status, r.raw)
	}
	if r := post(signed(signingSecret, "sig", 7, "s-1", ts(0))); r.status != 409 || r.body["error_code"] != "event_id_conflict" {
		t.Errorf("the event id with another delta: %d %s", r.status, r.raw)
	}
	// The clock stands still: s-1 was accepted at the very same instant, so the wait must
	// tell s-3 applied by the entry's version, not by its update time.
	if r := svc.do(t, http.MethodPost, "/v1/scores/increment?wait=true", tok, signed(signingSecret, "sig", 2, "s-3", ts(59*time.Second))); r.status != 200 || num(r.body["new_score"]) != 7 {
		t.Fatalf("59 s ahead: %d %s", r.status, r.raw)
	}
	// RFC 3339 lets "t" and "z" be lower case; the signature covers the timestamp as sent.
	if r := svc.do(t, http.MethodPost, "/v1/scores/increment?wait=true", tok, signed(signingSecret, "sig", 1, "s-4", strings.ToLower(ts(30*time.Second)))); r.status != 200 || num(r.body["new_score"]) != 8 {
		t.Fatalf("a lower-case RFC 3339 timestamp: %d %s", r.status, r.raw)
	}
	// Two minutes later the captured request is stale.
	clock.set(now.Add(2 * time.Minute))
	if r := post(captured); r.status != 401 || r.body["error_code"] != "stale_timestamp" {
		t.Errorf("replay outside the window: %d %s", r.status, r.raw)
	}
	if got := score(); got != 8 {
		t.Errorf("points after the replays: %d, want 8", got)
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 'sig'`); n != 3 {
		t.Errorf("%d history rows, want 3", n)
	}
	eventually(t, 10*time.Second, func() string {
		r := svc.do(t, http.MethodGet, "/admin/anomalies?user_id=sig", admin, "")
		reasons := map[string]int{}
		for _, it := range r.body["items"].([]any) {
			reasons[it.(map[string]any)["reason"].(string)]++
		}
		if reasons["invalid_signature"] != 4 || reasons["stale_timestamp"] != 3 {
			return fmt.Sprintf("anomalies by reason %v", reasons)
		}
		return ""
	})
	metricsShow(t, svc, `leaderboard_write_refusals_total{reason="invalid_signature"} 4`, `leaderboard_write_refusals_total{reason="stale_timestamp"} 3`)
}

// TestRateLimits: a player's 11th write inside the window is refused with 429 and the
// Retry-After the limiter gives; server tokens and other users go on; a board's own limit
// holds on top; a refused write changes nothing.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	// 10 per 600 s: the next write is allowed 60 s after the first. A minute is far longer
	// than the ten writes take on a loaded machine, so the check below cannot run out.
	vars["LEADERBOARD_RATE_LIMIT"] = "10/600s"
	svc := env.start(vars)
	player, other, srv := mintToken(t, "rl"), mintToken(t, "rl-other"), mintToken(t, "gs", "server")
	first := time.Now()
	for i := 1; i <= 10; i++ {
		if r := svc.submit(t, player, fmt.Sprintf(`{"score": %d, "event_id": "rl-%d"}`, i, i)); r.status != 202 {
			t.Fatalf("write %d: %d %s", i, r.status, r.raw)
		}
	}
	r := svc.submit(t, player, `{"score": 11, "event_id": "rl-11"}`)
	retry, _ := strconv.Atoi(r.header.Get("Retry-After"))
	// Allowed 60 s after the first write, less the time since (Retry-After rounds up).
	least := int(math.Ceil((60*time.Second - time.Since(first)).Seconds()))
	if r.status != 429 || r.body["error_code"] != "rate_limited" || retry < least || retry > 60 || r.body["event_id"] != "rl-11" {
		t.Fatalf("the 11th write: %d Retry-After %q %s", r.status, r.header.Get("Retry-After"), r.raw)
	}
	if r := svc.submit(t, srv, `{"score": 12, "user_id": "rl", "event_id": "rl-server"}`); r.status != 202 {
		t.Errorf("a server write for the limited user: %d %s", r.status, r.raw)
	}
	otherFirst := time.Now()
	if r := svc.submit(t, other, `{"score": 1}`); r.status != 202 {
		t.Errorf("another user: %d %s", r.status, r.raw)
	}
	// The arena board allows 3 writes per user a minute, on top of the 10.
	for i := 1; i <= 3; i++ {
		if r := svc.do(t, http.MethodPost, "/v1/boards/arena/scores", other, fmt.Sprintf(`{"value": %d}`, i)); r.status != 202 {
			t.Fatalf("arena write %d: %d %s", i, r.status, r.raw)
		}
	}
	if r := svc.do(t, http.MethodPost, "/v1/boards/arena/scores", other, `{"value": 4}`); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Errorf("the 4th arena write: %d %s", r.status, r.raw)
	}
	if r := svc.submit(t, other, `{"score": 2}`); r.status != 202 {
		t.Errorf("the user's writes to other boards go on: %d %s", r.status, r.raw)
	}
	// The refused arena write counted against the user's 10 too (README, Rate limits): 6
	// spent, 4 left; then 429 until 60 s after the user's first write.
	for i := 3; i <= 6; i++ {
		if r := svc.submit(t, other, fmt.Sprintf(`{"score": %d}`, i)); r.status != 202 {
			t.Fatalf("the user's write %d of 10: %d %s", i+4, r.status, r.raw)
		}
	}
	r = svc.submit(t, other, `{"score": 7}`)
	refused := 2
	if r.status == 429 {
		refused++
	} else if time.Since(otherFirst) < 55*time.Second {
		t.Errorf("the user's 11th write, the refused arena write among the 10: %d %s, want 429", r.status, r.raw)
	}
	eventually(t, 30*time.Second, func() string { // through the whole pipeline, on a loaded machine
		if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 'rl'`); n != 11 {
			return fmt.Sprintf("%d history rows of rl", n)
		}
		return ""
	})
	if n := env.count(`SELECT count(*) FROM score_history WHERE event_id = 'rl-11'`); n != 0 {
		t.Errorf("the refused write was applied")
	}
	metricsShow(t, svc, fmt.Sprintf(`leaderboard_write_refusals_total{reason="rate_limited"} %d`, refused))
}

// TestCooldowns: an increment with an action_id holds that action for the board's
// action_cooldown: inside it 429 cooldown_active with the seconds left; a retry of the
// write holding it is answered as the first time; other actions and users go on; a write
// that was not accepted gives the action back; after the cooldown (a moved clock) it is free.
// Another board's cooldown holds for its writes through /v1/boards/{id}/scores (they took no
// action_id: a cooldown set on a board but points could never be taken).
func TestCooldowns(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	clock := &testClock{}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock.set(now)
	svc := env.startWith(vars, clock.now)
	tok, other := mintToken(t, "cd"), mintToken(t, "cd-other")
	inc := func(tok, user, event, action string, delta int) response {
		t.Helper()
		return svc.do(t, http.MethodPost, "/v1/scores/increment", tok, fmt.Sprintf(`{"user_id": %q, "delta": %d, "event_id": %q, "timestamp": %q, "action_id": %q}`,
			user, delta, event, clock.now().Format(time.RFC3339), action))
	}
	if r := inc(tok, "cd", "c-1", "quest-1", 5); r.status != 202 {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	clock.set(now.Add(10 * time.Second))
	r := inc(tok, "cd", "c-2", "quest-1", 5)
	if r.status != 429 || r.body["error_code"] != "cooldown_active" || r.header.Get("Retry-After") != "20" {
		t.Fatalf("inside the cooldown: %d Retry-After %q %s", r.status, r.header.Get("Retry-After"), r.raw)
	}
	if r := inc(tok, "cd", "c-1", "quest-1", 5); r.status != 202 || r.body["processed_event_id"] != "c-1" {
		t.Errorf("a retry of the write holding the action: %d %s", r.status, r.raw)
	}
	if r := inc(tok, "cd", "c-3", "quest-2", 5); r.status != 202 {
		t.Errorf("another action: %d %s", r.status, r.raw)
	}
	if r := inc(other, "cd-other", "c-4", "quest-1", 5); r.status != 202 {
		t.Errorf("another user: %d %s", r.status, r.raw)
	}
	// c-3 again with another delta is a conflict: quest-3 was not done, it stays free.
	if r := inc(tok, "cd", "c-3", "quest-3", 9); r.status != 409 {
		t.Fatalf("a conflicting write: %d %s", r.status, r.raw)
	}
	if r := inc(tok, "cd", "c-5", "quest-3", 5); r.status != 202 {
		t.Errorf("the action of a write that was not accepted: %d %s", r.status, r.raw)
	}
	// A retry of c-1 naming another action is answered as the first time, and that action
	// was not done either (the retry took its lock and kept it; found by a review).
	if r := inc(tok, "cd", "c-1", "quest-4", 5); r.status != 202 || r.body["processed_event_id"] != "c-1" {
		t.Errorf("a retry of c-1 naming quest-4: %d %s", r.status, r.raw)
	}
	if r := inc(tok, "cd", "c-7", "quest-4", 5); r.status != 202 {
		t.Errorf("the action a retry named: %d %s", r.status, r.raw)
	}
	clock.set(now.Add(31 * time.Second))
	if r := inc(tok, "cd", "c-6", "quest-1", 5); r.status != 202 {
		t.Errorf("after the cooldown: %d %s", r.status, r.raw)
	}
	// Any board's action_cooldown holds for its writes through /v1/boards/{id}/scores.
	write := func(event, action string) response {
		t.Helper()
		return svc.do(t, http.MethodPost, "/v1/boards/daily/scores", tok, fmt.Sprintf(`{"value": 1, "event_id": %q, "action_id": %q}`, event, action))
	}
	if r := write("d-1", "chest-1"); r.status != 202 {
		t.Errorf("a daily write with an action: %d %s", r.status, r.raw)
	}
	if r := write("d-2", "chest-1"); r.status != 429 || r.body["error_code"] != "cooldown_active" || r.header.Get("Retry-After") != "60" {
		t.Errorf("the same action on daily inside its cooldown: %d Retry-After %q %s", r.status, r.header.Get("Retry-After"), r.raw)
	}
	if r := write("d-3", "bad action"); r.status != 400 || r.body["error_code"] != "invalid_action_id" {
		t.Errorf("an invalid action_id: %d %s", r.status, r.raw)
	}
	eventually(t, 30*time.Second, func() string { // through the whole pipeline, on a loaded machine
		r := svc.do(t, http.MethodGet, "/v1/boards/points/users/cd", tok, "")
		if num(r.body["score"]) != 25 { // c-1, c-3, c-5, c-7, c-6
			return r.raw
		}
		return ""
	})
}

// TestLimiterFailsClosed: with Redis cut, player writes are refused with 503
// limiter_unavailable while server-token writes are accepted, and nothing accepted is
// lost; with LEADERBOARD_LIMITER_FAIL_OPEN players are accepted too.
func TestLimiterFailsClosed(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	px := newProxy(t, testRedis)
	vars["LEADERBOARD_RATE_LIMIT"] = "10/60s"
	vars["LEADERBOARD_REDIS_URL"] = "redis://" + px.addr() + "/0"
	svc := env.start(vars)
	open := map[string]string{"LEADERBOARD_LIMITER_FAIL_OPEN": "true", "LEADERBOARD_HTTP_ADDR": "127.0.0.1:" + freePort(t), "LEADERBOARD_ROLES": "api"}
	for k, v := range vars {
		if _, ok := open[k]; !ok {
			open[k] = v
		}
	}
	failOpen := env.start(open)
	player, srv := mintToken(t, "fc"), mintToken(t, "gs", "server")
	px.setDown(true)
	r := svc.submit(t, player, `{"score": 1, "event_id": "fc-1"}`)
	if r.status != 503 || r.body["error_code"] != "limiter_unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("a player write without the limiter: %d %s", r.status, r.raw)
	}
	for i := range 5 {
		if r := svc.submit(t, srv, fmt.Sprintf(`{"score": %d, "user_id": "fc-s%d"}`, 10+i, i)); r.status != 202 {
			t.Fatalf("a server write without Redis: %d %s", r.status, r.raw)
		}
	}
	if r := failOpen.submit(t, player, `{"score": 2, "event_id": "fc-2"}`); r.status != 202 {
		t.Fatalf("a player write, fail-open: %d %s", r.status, r.raw)
	}
	px.setDown(false)
	eventually(t, 30*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM score_history WHERE user_id LIKE 'fc-s%' OR event_id = 'fc-2'`); n != 6 {
			return fmt.Sprintf("%d of 6 accepted writes applied", n)
		}
		return ""
	})
	if n := env.count(`SELECT count(*) FROM score_history WHERE event_id = 'fc-1'`); n != 0 {
		t.Errorf("the refused write was applied")
	}
	if r := svc.submit(t, player, `{"score": 3}`); r.status != 202 {
		t.Errorf("a player write with Redis back: %d %s", r.status, r.raw)
	}
}

// TestBounds: a value over the board's max_value and a delta over its max_delta are
// refused, recorded as anomalies, and change nothing.
func TestBounds(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	svc := env.start(vars)
	tok, admin := mintToken(t, "bd"), mintToken(t, "ops", "admin")
	for _, c := range []struct{ path, body string }{
		{"/v1/boards/arena/scores", `{"value": 1001}`},
		{"/v1/boards/arena/scores", `{"value": -1}`},
		{"/v1/boards/points/scores", `{"value": 101}`},
		{"/v1/scores/increment", `{"user_id": "bd", "delta": 101, "event_id": "bd-1", "timestamp": "2026-01-01T00:00:00Z"}`},
	} {
		if r := svc.do(t, http.MethodPost, c.path, tok, c.body); r.status != 400 || r.body["error_code"] != "value_out_of_range" {
			t.Errorf("%s %s: %d %s", c.path, c.body, r.status, r.raw)
		}
	}
	if r := svc.do(t, http.MethodPost, "/v1/boards/arena/scores?wait=true", tok, `{"value": 1000}`); r.status != 200 {
		t.Fatalf("the largest value: %d %s", r.status, r.raw)
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 'bd'`); n != 1 {
		t.Errorf("%d history rows, want 1", n)
	}
	eventually(t, 10*time.Second, func() string {
		r := svc.do(t, http.MethodGet, "/admin/anomalies?reason=value_out_of_range", admin, "")
		if items := r.body["items"].([]any); len(items) != 4 {
			return r.raw
		}
		return ""
	})
}

// TestRetryAfterBanIsAnsweredAsTheFirstTime: a write accepted before its user was banned is
// kept (applied hidden); its retry is answered as the first time, not 403 user_banned,
// which told a game server the point was refused when it was kept (with wait=true: 202 at
// once, as the entry is hidden). A new write of the user is refused, also one under an
// event id accepted before with another body. Found by a review of what the API accepts and the projector then does.
func TestRetryAfterBanIsAnsweredAsTheFirstTime(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	svc := env.start(vars)
	srv, admin, erin := mintToken(t, "gs", "server"), mintToken(t, "mod-ann", "admin"), mintToken(t, "erin")
	writes := []struct{ tok, path, body string }{
		{srv, "/v1/scores", `{"score": 11, "user_id": "dave", "event_id": "pre-ban-1"}`},
		{erin, "/v1/scores/increment", fmt.Sprintf(`{"user_id": "erin", "delta": 4, "event_id": "pre-ban-2", "timestamp": %q}`, time.Now().UTC().Format(time.RFC3339))},
	}
	for _, w := range writes {
		if r := svc.do(t, http.MethodPost, w.path+"?wait=true", w.tok, w.body); r.status != 200 {
			t.Fatalf("%s: %d %s", w.body, r.status, r.raw)
		}
	}
	for _, user := range []string{"dave", "erin"} {
		if r := svc.do(t, http.MethodPost, "/admin/users/"+user+"/ban?wait=true", admin, `{"reason": "aimbot"}`); r.status != 200 {
			t.Fatalf("ban %s: %d %s", user, r.status, r.raw)
		}
	}
	for _, w := range writes {
		r := svc.do(t, http.MethodPost, w.path, w.tok, w.body)
		if r.status != 200 && r.status != 202 || r.body["error_code"] != nil {
			t.Errorf("the retry of %s after the ban: %d %s, want it answered as the first time", w.body, r.status, r.raw)
		}
		// Waited for, it is not looked for in Redis, which hides the user's entries, for
		// the whole wait timeout (the harness's 30 s).
		start := time.Now()
		if r := svc.do(t, http.MethodPost, w.path+"?wait=true", w.tok, w.body); r.status != 202 || time.Since(start) > 10*time.Second {
			t.Errorf("the waited retry of %s after the ban: %d %s after %s, want 202 at once", w.body, r.status, r.raw, time.Since(start).Round(time.Millisecond))
		}
	}
	// The same event id with another body is the ban's 403, not a 409.
	if r := svc.do(t, http.MethodPost, "/v1/scores", srv, `{"score": 13, "user_id": "dave", "event_id": "pre-ban-1"}`); r.status != 403 || r.body["error_code"] != "user_banned" {
		t.Errorf("another write under the event id of one accepted before the ban: %d %s, want 403 user_banned", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodPost, "/v1/scores", srv, `{"score": 12, "user_id": "dave", "event_id": "post-ban"}`); r.status != 403 || r.body["error_code"] != "user_banned" {
		t.Errorf("a new write of the banned user: %d %s, want 403 user_banned", r.status, r.raw)
	}
}

// TestBanAndUnban: a banned user disappears from every read and stream of every board
// (ranks close up), PostgreSQL's degraded reads included, and cannot write; the unban brings
// them back with their scores. Both are audited.
func TestBanAndUnban(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	vars["LEADERBOARD_KAFKA_EMBEDDED_ADDR"] = broker
	svc := env.start(vars)
	srv, admin, viewer := mintToken(t, "gs", "server"), mintToken(t, "mod-ann", "admin"), mintToken(t, "viewer")
	for i := 1; i <= 5; i++ { // b5 leads with 50, b1 is last
		for _, board := range []string{"global", "daily"} {
			if r := svc.do(t, http.MethodPost, "/v1/boards/"+board+"/scores?wait=true", srv, fmt.Sprintf(`{"value": %d, "user_id": "b%d"}`, 10*i, i)); r.status != 200 {
				t.Fatalf("seed: %d %s", r.status, r.raw)
			}
		}
	}
	stream := svc.mustStream(t, "board=global&token="+url.QueryEscape(svc.realtimeToken(t, viewer)), "")
	reads := func() string {
		t.Helper()
		var out []string
		out = append(out, entryOrder(t, svc.do(t, http.MethodGet, "/v1/boards/global/top", viewer, "")))
		out = append(out, entryOrder(t, svc.do(t, http.MethodGet, "/v1/boards/daily/entries?size=10", viewer, "")))
		r := svc.do(t, http.MethodGet, "/v1/boards/global/users/b2?around=1", viewer, "")
		var around []string
		for _, e := range r.body["around"].([]any) {
			m := e.(map[string]any)
			around = append(around, fmt.Sprintf("%d:%s", num(m["rank"]), m["user_id"]))
		}
		out = append(out, strings.Join(around, " "))
		var friends []string
		for _, e := range svc.do(t, http.MethodGet, "/v1/boards/global/users?ids=b3,b4", viewer, "").body["entries"].([]any) {
			m := e.(map[string]any)
			friends = append(friends, fmt.Sprintf("%d:%s", num(m["rank"]), m["user_id"]))
		}
		out = append(out, strings.Join(friends, " "))
		out = append(out, strconv.Itoa(svc.do(t, http.MethodGet, "/v1/leaderboard/users/b3", viewer, "").status))
		return strings.Join(out, " | ")
	}
	before := reads()
	if want := "b5:50 b4:40 b3:30 b2:20 b1:10 | b5:50 b4:40 b3:30 b2:20 b1:10 | 3:b3 4:b2 5:b1 | 2:b4 3:b3 | 200"; before != want {
		t.Fatalf("before the ban: %s\nwant %s", before, want)
	}
	if r := svc.do(t, http.MethodPost, "/admin/users/b3/ban?wait=true", admin, `{"reason": "aimbot"}`); r.status != 200 || r.body["banned"] != true {
		t.Fatalf("ban: %d %s", r.status, r.raw)
	}
	if got, want := reads(), "b5:50 b4:40 b2:20 b1:10 | b5:50 b4:40 b2:20 b1:10 | 2:b4 3:b2 4:b1 | 2:b4 | 404"; got != want {
		t.Errorf("after the ban: %s\nwant %s", got, want)
	}
	eventually(t, 10*time.Second, func() string {
		ev := stream.named("leaderboard.updated")
		if len(ev) == 0 {
			return "no snapshot on the stream yet"
		}
		if entries := fmt.Sprint(ev[len(ev)-1].data["entries"]); entries == "" || strings.Contains(entries, "b3") {
			return "the stream still shows b3: " + entries
		}
		return ""
	})
	for _, c := range []struct{ tok, body string }{{mintToken(t, "b3"), `{"score": 99}`}, {srv, `{"score": 99, "user_id": "b3"}`}} {
		if r := svc.submit(t, c.tok, c.body); r.status != 403 || r.body["error_code"] != "user_banned" {
			t.Errorf("a write of the banned user: %d %s", r.status, r.raw)
		}
	}
	// A write accepted before the ban and applied after it lands hidden, on a new board too.
	late, _ := json.Marshal(messages.ScoreSubmitted{EventID: "late-1", Board: "points", Period: "all_time", UserID: "b3", Value: 7, OccurredAt: time.Now().UTC()})
	produceRaw(t, broker, "leaderboard.score-events", &sarama.ProducerMessage{Key: sarama.StringEncoder("b3"), Value: sarama.ByteEncoder(late)})
	eventually(t, 10*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM board_entries WHERE user_id = 'b3' AND board_id = 'points' AND hidden`); n != 1 {
			return "the late write is not applied hidden"
		}
		return ""
	})
	if r := svc.do(t, http.MethodGet, "/v1/boards/points/top", viewer, ""); strings.Contains(r.raw, "b3") {
		t.Errorf("the banned user's late write shows: %s", r.raw)
	}
	// PostgreSQL's reads (the degraded path, older periods) leave the user out too.
	if n := env.count(`SELECT count(*) FROM visible_entries WHERE user_id = 'b3'`); n != 0 {
		t.Errorf("%d visible entries of the banned user", n)
	}
	if r := svc.do(t, http.MethodGet, "/admin/users/b3/ban", admin, ""); r.status != 200 || r.body["reason"] != "aimbot" || r.body["banned_by"] != "mod-ann" {
		t.Errorf("the ban: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodDelete, "/admin/users/b3/ban?wait=true", admin, `{"reason": "appeal accepted"}`); r.status != 200 || r.body["banned"] != false {
		t.Fatalf("unban: %d %s", r.status, r.raw)
	}
	if got := reads(); got != before {
		t.Errorf("after the unban: %s\nwant %s", got, before)
	}
	eventually(t, 10*time.Second, func() string {
		ev := stream.named("leaderboard.updated")
		if !strings.Contains(fmt.Sprint(ev[len(ev)-1].data["entries"]), "b3") {
			return "the stream does not show b3 again"
		}
		return ""
	})
	if r := svc.do(t, http.MethodGet, "/v1/boards/points/users/b3", viewer, ""); r.status != 200 || num(r.body["score"]) != 7 || num(r.body["rank"]) != 1 {
		t.Errorf("the late write after the unban: %d %s", r.status, r.raw)
	}
	if r := svc.submit(t, mintToken(t, "b3"), `{"score": 99}`); r.status != 202 {
		t.Errorf("a write after the unban: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodDelete, "/admin/users/b3/ban", admin, ""); r.status != 404 || r.body["error_code"] != "not_banned" {
		t.Errorf("unban of a user not banned: %d %s", r.status, r.raw)
	}
	for _, c := range []struct {
		method, path, body, code string
		status                   int
	}{
		{"POST", "/admin/users/b3/ban", `{}`, "invalid_reason", 400},
		{"POST", "/admin/users/bad%20id/ban", `{"reason": "x"}`, "invalid_user_id", 400},
	} {
		if r := svc.do(t, c.method, c.path, admin, c.body); r.status != c.status || r.body["error_code"] != c.code {
			t.Errorf("%s %s %s: %d %s", c.method, c.path, c.body, r.status, r.raw)
		}
	}
	if r := svc.do(t, http.MethodPost, "/admin/users/b1/ban", viewer, `{"reason": "x"}`); r.status != 403 {
		t.Errorf("a ban by a player: %d %s", r.status, r.raw)
	}
	r := svc.do(t, http.MethodGet, "/admin/audit?limit=2", admin, "")
	items := r.body["items"].([]any)
	if len(items) != 2 || items[0].(map[string]any)["action"] != "user.unban" || items[1].(map[string]any)["action"] != "user.ban" ||
		items[1].(map[string]any)["actor"] != "mod-ann" || items[1].(map[string]any)["target"] != "b3" || items[1].(map[string]any)["reason"] != "aimbot" {
		t.Errorf("audit: %s", r.raw)
	}
}

// TestAdjustAndRemove: an admin's adjustment and removal go through the pipeline: in the
// history once each, through a restart with the outbox replayed; a retry of the
// adjustment is answered the same, another value with its event id is a conflict.
func TestAdjustAndRemove(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	svc := env.start(vars)
	env.keepOutboxRows()
	srv, admin, viewer := mintToken(t, "gs", "server"), mintToken(t, "mod-bo", "admin"), mintToken(t, "viewer")
	for _, body := range []string{`{"value": 500, "user_id": "aj"}`, `{"value": 300, "user_id": "rm"}`, `{"value": 100, "user_id": "ok"}`} {
		if r := svc.do(t, http.MethodPost, "/v1/boards/global/scores?wait=true", srv, body); r.status != 200 {
			t.Fatalf("seed: %d %s", r.status, r.raw)
		}
	}
	adjust := `{"value": 50, "reason": "score from a bugged level", "event_id": "adj-1"}`
	if r := svc.do(t, http.MethodPost, "/admin/boards/global/entries/aj/adjust?wait=true", admin, adjust); r.status != 200 || r.body["status"] != "applied" {
		t.Fatalf("adjust: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodDelete, "/admin/boards/global/entries/rm?wait=true&reason=cheating", admin, ""); r.status != 200 {
		t.Fatalf("remove: %d %s", r.status, r.raw)
	}
	want := "ok:100 aj:50"
	if got := entryOrder(t, svc.do(t, http.MethodGet, "/v1/boards/global/top", viewer, "")); got != want {
		t.Fatalf("after the adjustment and the removal: %s, want %s", got, want)
	}
	// A restart, with the outbox replayed from the start: each applied once.
	svc.stop(t)
	if n := env.replayOutbox(); n < 5 {
		t.Fatalf("%d outbox rows replayed, want the 5 commands at least", n)
	}
	svc = env.start(vars)
	eventually(t, 20*time.Second, func() string {
		if got := scrape(t, svc)[`leaderboard_projector_events_total{board="global",result="redelivered"}`]; got < 5 {
			return fmt.Sprintf("%v redeliveries", got)
		}
		return ""
	})
	if got := entryOrder(t, svc.do(t, http.MethodGet, "/v1/boards/global/top", viewer, "")); got != want {
		t.Errorf("after the replay: %s, want %s", got, want)
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE operator = 'adjust' AND user_id = 'aj' AND value = 50`); n != 1 {
		t.Errorf("%d adjustments in the history", n)
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE operator = 'remove' AND user_id = 'rm'`); n != 1 {
		t.Errorf("%d removals in the history", n)
	}
	if n := env.count(`SELECT count(*) FROM board_entries WHERE user_id = 'rm'`); n != 0 {
		t.Errorf("the removed entry is still in PostgreSQL")
	}
	if r := svc.do(t, http.MethodPost, "/admin/boards/global/entries/aj/adjust", admin, adjust); r.status != 202 || r.body["event_id"] != "adj-1" {
		t.Errorf("a retry of the adjustment: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodPost, "/admin/boards/global/entries/aj/adjust", admin, `{"value": 60, "reason": "x", "event_id": "adj-1"}`); r.status != 409 {
		t.Errorf("the event id with another value: %d %s", r.status, r.raw)
	}
	for _, c := range []struct {
		method, path, body, code string
		status                   int
	}{
		{"POST", "/admin/boards/global/entries/aj/adjust", `{"value": 5}`, "invalid_reason", 400},
		{"POST", "/admin/boards/global/entries/aj/adjust", `{"value": -5, "reason": "x"}`, "value_out_of_range", 400},
		{"POST", "/admin/boards/nope/entries/aj/adjust", `{"value": 5, "reason": "x"}`, "unknown_board", 404},
		{"POST", "/admin/boards/daily/entries/aj/adjust", `{"value": 5, "reason": "x", "period": "2026-02-30"}`, "invalid_period", 400},
		{"DELETE", "/admin/boards/global/entries/rm?reason=again", "", "not_found", 404},
		{"DELETE", "/admin/boards/global/entries/aj?reason=%07", "", "invalid_reason", 400},
	} {
		if r := svc.do(t, c.method, c.path, admin, c.body); r.status != c.status || r.body["error_code"] != c.code {
			t.Errorf("%s %s %s: %d %s, want %d %s", c.method, c.path, c.body, r.status, r.raw, c.status, c.code)
		}
	}
	r := svc.do(t, http.MethodGet, "/admin/audit", admin, "")
	actions := map[string]int{}
	for _, it := range r.body["items"].([]any) {
		m := it.(map[string]any)
		if m["actor"] == "mod-bo" {
			actions[m["action"].(string)]++
		}
	}
	if actions["entry.adjust"] != 1 || actions["entry.remove"] != 1 {
		t.Errorf("audited: %v", actions)
	}
}

// TestAnomalyAndAuditPages: both pages walk newest first by cursor, each item once, and
// take filters; players cannot read them.
func TestAnomalyAndAuditPages(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	svc := env.start(vars)
	admin := mintToken(t, "ops", "admin")
	for i := range 7 {
		user := fmt.Sprintf("an-%d", i%2)
		if r := svc.do(t, http.MethodPost, "/v1/boards/arena/scores", mintToken(t, user), fmt.Sprintf(`{"value": %d, "event_id": "an-%d"}`, 2000+i, i)); r.status != 400 {
			t.Fatalf("refusal %d: %d %s", i, r.status, r.raw)
		}
	}
	for i := range 3 {
		if r := svc.do(t, http.MethodPost, fmt.Sprintf("/admin/users/banned-%d/ban", i), admin, `{"reason": "test"}`); r.status != 202 {
			t.Fatalf("ban: %d %s", r.status, r.raw)
		}
	}
	walk := func(path string, limit int) []map[string]any {
		t.Helper()
		var out []map[string]any
		cursor := ""
		for range 10 {
			p := fmt.Sprintf("%s%slimit=%d", path, map[bool]string{true: "&", false: "?"}[strings.Contains(path, "?")], limit)
			if cursor != "" {
				p += "&cursor=" + cursor
			}
			r := svc.do(t, http.MethodGet, p, admin, "")
			if r.status != 200 {
				t.Fatalf("%s: %d %s", p, r.status, r.raw)
			}
			for _, it := range r.body["items"].([]any) {
				out = append(out, it.(map[string]any))
			}
			next, _ := r.body["next_cursor"].(string)
			if next == "" {
				return out
			}
			cursor = next
		}
		t.Fatalf("%s does not end", path)
		return nil
	}
	var all []map[string]any
	eventually(t, 10*time.Second, func() string {
		all = walk("/admin/anomalies", 3)
		if len(all) != 7 {
			return fmt.Sprintf("%d anomalies", len(all))
		}
		return ""
	})
	for i, it := range all {
		if want := fmt.Sprintf("an-%d", 6-i); it["event_id"] != want || it["reason"] != "value_out_of_range" || it["board"] != "arena" {
			t.Errorf("anomaly %d: %v, want event %s", i, it, want)
		}
	}
	if got := walk("/admin/anomalies?user_id=an-1", 2); len(got) != 3 {
		t.Errorf("anomalies of an-1: %d", len(got))
	}
	if got := walk("/admin/anomalies?reason=rate_limited", 2); len(got) != 0 {
		t.Errorf("anomalies of another reason: %d", len(got))
	}
	audit := walk("/admin/audit", 2)
	if len(audit) != 3 || audit[0]["target"] != "banned-2" || audit[2]["target"] != "banned-0" {
		t.Errorf("audit: %v", audit)
	}
	for _, path := range []string{"/admin/anomalies", "/admin/audit"} {
		if r := svc.do(t, http.MethodGet, path, mintToken(t, "player"), ""); r.status != 403 {
			t.Errorf("%s for a player: %d", path, r.status)
		}
		if r := svc.do(t, http.MethodGet, path+"?cursor=x", admin, ""); r.status != 400 || r.body["error_code"] != "invalid_cursor" {
			t.Errorf("%s with a bad cursor: %d %s", path, r.status, r.raw)
		}
	}
}
