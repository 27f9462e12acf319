package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/openleaderboard/leaderboard/configs"
	lbhttp "github.com/openleaderboard/leaderboard/http"
)

// TestRealtimeTokenOpensStreamsOnly: a realtime token (made to sit in URLs) opens a
// stream and is refused everywhere else, including where it was minted.
func TestRealtimeTokenOpensStreamsOnly(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	admin := mintToken(t, "ops", "admin", "server")
	rt := svc.realtimeToken(t, admin)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/scores", `{"score": 1}`},
		{"GET", "/v1/leaderboard/top", ""},
		{"GET", "/v1/leaderboard/me", ""},
		{"GET", "/v1/leaderboard/users/ops", ""},
		{"GET", "/v1/realtime/token", ""},
		{"GET", "/admin/dlq", ""},
		{"POST", "/admin/boards/global/rebuild", ""},
	} {
		if r := svc.do(t, c.method, c.path, rt, c.body); r.status != http.StatusUnauthorized || r.body["error_code"] != "unauthorized" {
			t.Errorf("%s %s with a realtime token: %d %s, want 401", c.method, c.path, r.status, r.raw)
		}
	}
	if n := env.count(`SELECT count(*) FROM score_requests`); n != 0 {
		t.Fatalf("a realtime token submitted %d scores", n)
	}
	if _, status := svc.stream(t, "token="+rt, ""); status != 200 {
		t.Fatalf("realtime token on the stream: %d", status)
	}
}

// TestJWTHygiene: 30 s of clock skew on exp, nbf and iat; a token issued in the future or
// living longer than LEADERBOARD_JWT_MAX_TTL is refused.
func TestJWTHygiene(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(map[string]string{"LEADERBOARD_JWT_MAX_TTL": "2h"})
	now := time.Now()
	at := func(d time.Duration) *jwt.NumericDate { return jwt.NewNumericDate(now.Add(d)) }
	tok := func(c jwt.RegisteredClaims) string {
		c.Subject = "skewed"
		return signToken(t, lbhttp.Claims{RegisteredClaims: c})
	}
	cases := []struct {
		name   string
		claims jwt.RegisteredClaims
		status int
	}{
		{"expired 10 s ago, inside the skew", jwt.RegisteredClaims{ExpiresAt: at(-10 * time.Second)}, 200},
		{"expired 2 min ago", jwt.RegisteredClaims{ExpiresAt: at(-2 * time.Minute)}, 401},
		{"not before 10 s from now, inside the skew", jwt.RegisteredClaims{ExpiresAt: at(time.Hour), NotBefore: at(10 * time.Second)}, 200},
		{"not before 2 min from now", jwt.RegisteredClaims{ExpiresAt: at(time.Hour), NotBefore: at(2 * time.Minute)}, 401},
		{"issued 10 s in the future, inside the skew", jwt.RegisteredClaims{ExpiresAt: at(time.Hour), IssuedAt: at(10 * time.Second)}, 200},
		{"issued 2 min in the future", jwt.RegisteredClaims{ExpiresAt: at(time.Hour), IssuedAt: at(2 * time.Minute)}, 401},
		{"lives 1 h 59 min from iat", jwt.RegisteredClaims{IssuedAt: at(-time.Minute), ExpiresAt: at(118 * time.Minute)}, 200},
		{"lives 2 h 1 min from iat", jwt.RegisteredClaims{IssuedAt: at(-time.Hour), ExpiresAt: at(61 * time.Minute)}, 401},
		{"no iat, expires in 3 h", jwt.RegisteredClaims{ExpiresAt: at(3 * time.Hour)}, 401},
		{"no iat, expires in 1 h", jwt.RegisteredClaims{ExpiresAt: at(time.Hour)}, 200},
	}
	for _, c := range cases {
		r := svc.do(t, http.MethodGet, "/v1/leaderboard/top", tok(c.claims), "")
		if r.status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.status, r.raw, c.status)
		}
	}
}

// TestDevSecretRefusedOffLoopback: the published development secret is accepted only while
// the API listens on a loopback address; a real secret must have at least 32 bytes.
func TestDevSecretRefusedOffLoopback(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	for name, over := range map[string]map[string]string{
		"dev secret on all interfaces": {"LEADERBOARD_JWT_SECRET": "", "LEADERBOARD_HTTP_ADDR": "0.0.0.0:" + freePort(t)},
		"dev secret on an empty host":  {"LEADERBOARD_JWT_SECRET": "", "LEADERBOARD_HTTP_ADDR": ":" + freePort(t)},
		"short secret":                 {"LEADERBOARD_JWT_SECRET": "only-31-bytes-long-secret-xxxxx"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var out bytes.Buffer
		err := run(ctx, nil, env.getenv(over), &out)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "LEADERBOARD_JWT_SECRET") {
			t.Errorf("%s: run returned %v, want a refusal naming LEADERBOARD_JWT_SECRET", name, err)
		}
	}
	// On loopback the development secret still works with no setup.
	svc := env.start(map[string]string{"LEADERBOARD_JWT_SECRET": ""})
	if r := svc.do(t, http.MethodGet, "/healthz", "", ""); r.status != 200 {
		t.Fatalf("dev secret on loopback: %d", r.status)
	}
	// A page whose host name resolves to 127.0.0.1 (DNS rebinding) reaches the port from a
	// developer's browser as its own origin: a request naming another host is refused,
	// before anything else, so the published secret's tokens are no use to it.
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(svc.base, "http://"))
	admin := signTokenWith(t, configs.DevJWTSecret, lbhttp.Claims{Roles: []string{"admin"},
		RegisteredClaims: jwt.RegisteredClaims{Subject: "ops", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	for host, want := range map[string]int{"evil.example:" + port: 403, "evil.example": 403, "127.0.0.1.nip.io:" + port: 403,
		"localhost:" + port: 200, "127.0.0.1:" + port: 200, "[::1]:" + port: 200} {
		req, _ := http.NewRequest(http.MethodGet, svc.base+"/admin/dlq", nil)
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s with the development secret: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// TestMetricsLabelsAreBounded: invented request methods and paths do not create series.
func TestMetricsLabelsAreBounded(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	for i := range 5 {
		svc.do(t, fmt.Sprintf("INVENTED%d", i), "/v1/leaderboard/top", "", "")
		svc.do(t, http.MethodGet, fmt.Sprintf("/no/such/path/%d", i), "", "")
	}
	for series := range scrape(t, svc) {
		if strings.Contains(series, "INVENTED") || strings.Contains(series, "/no/such") {
			t.Errorf("an unauthenticated caller created the series %s", series)
		}
	}
	metricsShow(t, svc, `leaderboard_http_requests_total{method="other",route="unmatched",status="405"} 5`,
		`leaderboard_http_requests_total{method="GET",route="unmatched",status="404"} 5`)
}

// TestContractGaps: 405s carry Allow and win over auth; HEAD answers as GET without a
// body; help exits 0; a busy listen address fails before anything else starts.
func TestContractGaps(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	admin := mintToken(t, "ops", "admin")
	player := mintToken(t, "player")
	for _, c := range []struct {
		method, path, tok, allow string
	}{
		{"PUT", "/v1/scores", player, "POST"},
		{"HEAD", "/v1/scores", player, "POST"},
		{"DELETE", "/v1/leaderboard/top", "", "GET, HEAD"},
		{"GET", "/admin/dlq/requeue", admin, "POST"},
		{"PUT", "/admin/dlq", player, "GET, HEAD"},
		{"PUT", "/admin/dlq/7", "", "DELETE, GET, HEAD"},
	} {
		r := svc.do(t, c.method, c.path, c.tok, "")
		if r.status != http.StatusMethodNotAllowed || c.method != "HEAD" && r.body["error_code"] != "method_not_allowed" || strings.Join(r.header.Values("Allow"), ", ") != c.allow {
			t.Errorf("%s %s: %d Allow %q %s, want 405 with Allow %q", c.method, c.path, r.status, r.header.Values("Allow"), r.raw, c.allow)
		}
	}

	// HEAD is its GET without the body (RFC 9110 9.3.2): monitors and proxies probe with it.
	for _, c := range []struct {
		path, tok string
		status    int
	}{
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/", "", 200},
		{"/v1/leaderboard/top", player, 200},
		{"/v1/leaderboard/top", "", 401},
		{"/admin/dlq", player, 403},
		{"/admin/dlq", admin, 200},
		{"/v1/realtime/leaderboard?token=" + svc.realtimeToken(t, player), "", 200},
	} {
		var get response
		if strings.HasPrefix(c.path, "/v1/realtime/leaderboard") { // a GET would stream on
			get = response{status: 200, header: http.Header{"Content-Type": {"text/event-stream"}}}
		} else {
			get = svc.do(t, "GET", c.path, c.tok, "")
		}
		head := svc.do(t, "HEAD", c.path, c.tok, "")
		if head.status != c.status || get.status != c.status || head.raw != "" || head.header.Get("Content-Type") != get.header.Get("Content-Type") {
			t.Errorf("HEAD %s: %d %q (Content-Type %q), want %d with GET's Content-Type %q and no body",
				c.path, head.status, head.raw, head.header.Get("Content-Type"), c.status, get.header.Get("Content-Type"))
		}
	}

	// The stream's HEAD opened no stream (net/http eats a HEAD's body: one would run on,
	// unseen, until the connection closed).
	if got := scrape(t, svc)["leaderboard_sse_clients"]; got != 0 {
		t.Errorf("leaderboard_sse_clients = %v after a HEAD of the stream, want 0", got)
	}

	var out bytes.Buffer
	for _, arg := range []string{"help", "-h", "--help"} {
		out.Reset()
		if err := run(context.Background(), []string{arg}, env.getenv(nil), &out); err != nil || !strings.Contains(out.String(), "usage:") {
			t.Errorf("leaderboard %s: %v, printed %q", arg, err, out.String())
		}
	}

	// A taken port: the error names it, and nothing was started (no database created).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := newTestEnv(t)
	start := time.Now()
	err = run(context.Background(), nil, busy.getenv(map[string]string{"LEADERBOARD_HTTP_ADDR": ln.Addr().String()}), &out)
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("run on a busy port: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("run on a busy port took %v to fail", took)
	}
	if n := env.count(`SELECT count(*) FROM pg_database WHERE datname = $1`, busy.dbName); n != 0 {
		t.Fatalf("run on a busy port created its database before failing")
	}
}

// TestHTTPHardening: nosniff everywhere, a strict page policy, and a bound on headers.
func TestHTTPHardening(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	for _, path := range []string{"/", "/healthz", "/metrics", "/v1/leaderboard/top", "/nope"} {
		if r := svc.do(t, http.MethodGet, path, "", ""); r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q", path, r.header.Get("X-Content-Type-Options"))
		}
	}
	page := svc.do(t, http.MethodGet, "/", "", "")
	csp := page.header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("page CSP %q lacks frame-ancestors 'none'", csp)
	}
	if strings.Contains(scriptSrc(csp), "'unsafe-inline'") || page.header.Get("Referrer-Policy") == "" {
		t.Errorf("page: script-src %q, Referrer-Policy %q", scriptSrc(csp), page.header.Get("Referrer-Policy"))
	}
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(page.raw, -1) {
		if !strings.Contains(tag, ` src="/static/`) && !strings.Contains(tag, `type="application/json"`) {
			t.Errorf("the page has an inline script: %s", tag)
		}
	}
	if !strings.Contains(page.raw, `"id":"fastest"`) {
		t.Errorf("the page has no board list to pick from")
	}
	req, _ := http.NewRequest(http.MethodGet, svc.base+"/healthz", nil)
	req.Header.Set("X-Padding", strings.Repeat("p", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("64 KiB of headers: %d, want 431", resp.StatusCode)
	}
}

func scriptSrc(csp string) string {
	for _, d := range strings.Split(csp, ";") {
		if d = strings.TrimSpace(d); strings.HasPrefix(d, "script-src") {
			return d
		}
	}
	// Without script-src, default-src governs scripts.
	for _, d := range strings.Split(csp, ";") {
		if d = strings.TrimSpace(d); strings.HasPrefix(d, "default-src") {
			return d
		}
	}
	return ""
}

// TestEventIDsAreScopedByUser: one user's event_id never blocks another user's.
func TestEventIDsAreScopedByUser(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	alice, bob := mintToken(t, "alice"), mintToken(t, "bob")
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", alice, `{"score": 10, "event_id": "bob-match-18"}`); r.status != 200 {
		t.Fatalf("alice: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", bob, `{"score": 20, "event_id": "bob-match-18"}`); r.status != 200 || r.body["status"] != "applied" {
		t.Fatalf("bob's own event id after alice took it: %d %s", r.status, r.raw)
	}
	// Each user's retry is still recognised, and another body is still a conflict.
	if r := svc.submit(t, bob, `{"score": 20, "event_id": "bob-match-18"}`); r.status != 202 {
		t.Fatalf("bob's retry: %d %s", r.status, r.raw)
	}
	if r := svc.submit(t, alice, `{"score": 30, "event_id": "bob-match-18"}`); r.status != 409 {
		t.Fatalf("alice reusing her event id with another body: %d %s", r.status, r.raw)
	}
	for user, score := range map[string]int64{"alice": 10, "bob": 20} {
		if r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/"+user, alice, ""); num(r.body["score"]) != score {
			t.Errorf("%s: %s, want score %d", user, r.raw, score)
		}
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE event_id = 'bob-match-18'`); n != 2 {
		t.Fatalf("%d history rows for the shared event id, want 2", n)
	}
}

// TestConcurrentRebuildsAreRefused: while one rebuild of a board runs, a second is
// answered 409, so a partial shadow is never swapped in; rebuilds and consistency runs
// are in the audit trail with actor and target, over HTTP and from the CLI.
func TestConcurrentRebuildsAreRefused(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	admin := mintToken(t, "ops-bea", "admin")
	mustApply(t, svc, mintToken(t, "seed"), `{"score": 1}`)
	// Enough entries that a rebuild takes a while.
	if _, err := env.db().Exec(context.Background(), `
		INSERT INTO board_entries (board_id, period, user_id, score, sort_key, version, reached_at, updated_at)
		SELECT 'global', 'all_time', 'bulk-' || i, i, i, 1, now(), now() FROM generate_series(1, 60000) i`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	statuses := make([]int, 3)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := svc.do(t, http.MethodPost, "/admin/boards/global/rebuild", admin, "")
			statuses[i] = r.status
			if r.status == http.StatusConflict && r.body["error_code"] != "rebuild_in_progress" {
				t.Errorf("refused rebuild: %s", r.raw)
			}
		}()
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	ok, refused := 0, 0
	for _, s := range statuses {
		switch s {
		case 200:
			ok++
		case 409:
			refused++
		}
	}
	if ok < 1 || refused < 1 || ok+refused != len(statuses) {
		t.Fatalf("concurrent rebuilds answered %v, want one 200 and the others 409", statuses)
	}
	if r := svc.do(t, http.MethodGet, "/admin/consistency?board=global&mode=full", admin, ""); r.status != 200 || r.body["consistent"] != true {
		t.Fatalf("after the rebuilds: %d %s", r.status, r.raw)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"rebuild", "-board", "global"}, env.getenv(nil), &out); err != nil {
		t.Fatalf("rebuild CLI: %v", err)
	}
	if n := env.count(`SELECT count(*) FROM admin_audit WHERE actor = 'ops-bea' AND action = 'board.rebuild' AND target = 'global/all_time'`); n != ok {
		t.Errorf("%d audited HTTP rebuilds, want %d", n, ok)
	}
	if n := env.count(`SELECT count(*) FROM admin_audit WHERE actor = 'ops-bea' AND action = 'board.consistency' AND target = 'global/all_time'`); n != 1 {
		t.Errorf("%d audited consistency runs, want 1", n)
	}
	if n := env.count(`SELECT count(*) FROM admin_audit WHERE actor LIKE 'cli:%' AND action = 'board.rebuild' AND target = 'global/all_time'`); n != 1 {
		t.Errorf("%d audited CLI rebuilds, want 1", n)
	}
}
