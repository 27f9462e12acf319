package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/openleaderboard/leaderboard/configs"
	lbhttp "github.com/openleaderboard/leaderboard/http"
)

// TestMatchStreamUserRankUpdated: a stream of a match board (board=match:m-7) sends
// user.rank.updated for the token's own user when their entry changes, as API.md promises
// for any board. (The users' notification named board "match", period "m-7:all_time": the
// board period was split at the match id's colon. Found by a review.)
func TestMatchStreamUserRankUpdated(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	srv, alice := mintToken(t, "game-server", "server"), mintToken(t, "alice")
	point := func(user, body string) {
		t.Helper()
		if r := svc.do(t, http.MethodPost, "/v1/matches/m-7/users/"+user+"/point?wait=true", srv, body); r.status != 200 {
			t.Fatalf("point for %s: %d %s", user, r.status, r.raw)
		}
	}
	point("alice", `{"point": 3}`)
	c := svc.mustStream(t, "board=match:m-7&token="+svc.realtimeToken(t, alice), "")
	eventually(t, 20*time.Second, func() string {
		if u := c.named("user.rank.updated"); len(u) == 0 || num(u[0].data["score"]) != 3 {
			return fmt.Sprintf("own entry on connect: %v", u)
		}
		return ""
	})
	point("alice", `{"point": 5}`) // alice now has 8
	// The top (a leaderboard.updated) reaches the stream: notifications flow.
	eventually(t, 20*time.Second, func() string {
		ups := c.named("leaderboard.updated")
		if len(ups) == 0 {
			return "no snapshot"
		}
		es, _ := ups[len(ups)-1].data["entries"].([]any)
		if len(es) != 1 || num(es[0].(map[string]any)["score"]) != 8 {
			return fmt.Sprintf("top on the stream: %v", ups[len(ups)-1].data)
		}
		return ""
	})
	// And the user's own rank event with the new score.
	eventually(t, 10*time.Second, func() string {
		u := c.named("user.rank.updated")
		if last := u[len(u)-1]; num(last.data["score"]) != 8 || last.data["board"] != "match:m-7" {
			return fmt.Sprintf("user.rank.updated events on the match stream: %v", u)
		}
		return ""
	})
}

// TestRealtimeTokenWithShortMaxTTL: under LEADERBOARD_JWT_MAX_TTL=5m a realtime token lives
// at most 5 minutes, so the stream accepts it (it signed 10-minute tokens, which it then
// refused as living longer than the max TTL. Found by a review).
func TestRealtimeTokenWithShortMaxTTL(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(map[string]string{"LEADERBOARD_JWT_MAX_TTL": "5m"})
	bearer := signToken(t, shortClaims("short", 4*time.Minute))
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/top", bearer, ""); r.status != 200 {
		t.Fatalf("bearer token within the max TTL: %d %s", r.status, r.raw)
	}
	rt := svc.realtimeToken(t, bearer)
	if _, status := svc.stream(t, "board=global&token="+rt, ""); status != 200 {
		t.Fatalf("stream with the service's own realtime token under LEADERBOARD_JWT_MAX_TTL=5m: %d, want 200", status)
	}
}

func shortClaims(sub string, ttl time.Duration) lbhttp.Claims {
	now := time.Now()
	return lbhttp.Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: sub, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl))}}
}

// TestRealtimeTokenNeverOutlivesItsBearer: a realtime token expires no later than the bearer
// token it was traded for (it got 10 minutes whatever the bearer had left: a bearer token
// about to expire bought streams for 10 more minutes. Found by a review).
func TestRealtimeTokenNeverOutlivesItsBearer(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	bearerExp := time.Now().Add(20 * time.Second)
	bearer := signToken(t, lbhttp.Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "brief", IssuedAt: jwt.NewNumericDate(time.Now()), ExpiresAt: jwt.NewNumericDate(bearerExp)}})
	r := svc.do(t, http.MethodGet, "/v1/realtime/token", bearer, "")
	if r.status != 200 {
		t.Fatalf("realtime token: %d %s", r.status, r.raw)
	}
	exp, err := time.Parse(time.RFC3339, r.body["expires_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if exp.After(bearerExp.Add(time.Second)) {
		t.Fatalf("the realtime token expires at %s, %v after the bearer token it was traded for (%s)", exp, exp.Sub(bearerExp).Round(time.Second), bearerExp.UTC())
	}
}

// TestRealtimeTokenIsNotCacheable: GET /v1/realtime/token answers a credential in
// its body without Cache-Control: no-store (RFC 6749 5.1 asks it of token responses). A
// browser or a caching proxy in between may keep it. The answer must say no-store.
func TestRealtimeTokenIsNotCacheable(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	r := svc.do(t, http.MethodGet, "/v1/realtime/token", mintToken(t, "alice"), "")
	if r.status != 200 {
		t.Fatalf("realtime token: %d %s", r.status, r.raw)
	}
	if cc := r.header.Get("Cache-Control"); !strings.Contains(cc, "no-store") {
		t.Errorf("GET /v1/realtime/token: Cache-Control %q, want no-store (the body is a credential)", cc)
	}
}

// TestJWTAudience: with LEADERBOARD_JWT_AUDIENCE set, a bearer token is taken only when its
// aud names that audience, so a token another service that shares the secret was given is
// refused here; the service's own realtime tokens still open streams, and `leaderboard
// token` signs tokens the service takes.
func TestJWTAudience(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(map[string]string{"LEADERBOARD_JWT_AUDIENCE": "lb-test"})
	withAud := func(sub string, aud ...string) string {
		c := shortClaims(sub, time.Hour)
		c.Audience = aud
		return signToken(t, c)
	}
	for name, tok := range map[string]string{
		"no aud":                    withAud("a1"),
		"another service's aud":     withAud("a2", "billing"),
		"the realtime aud":          withAud("a3", "realtime"),
		"an aud that only contains": withAud("a4", "lb-test-2"),
	} {
		if r := svc.do(t, http.MethodGet, "/v1/leaderboard/top", tok, ""); r.status != 401 {
			t.Errorf("a bearer token with %s: %d %s, want 401", name, r.status, r.raw)
		}
	}
	good := withAud("alice", "billing", "lb-test")
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/top", good, ""); r.status != 200 {
		t.Fatalf("a bearer token whose aud names lb-test: %d %s, want 200", r.status, r.raw)
	}
	if _, status := svc.stream(t, "board=global&token="+svc.realtimeToken(t, good), ""); status != 200 {
		t.Errorf("stream with the service's own realtime token: %d, want 200", status)
	}
	// A realtime token of another deployment that shares the secret names only "realtime".
	if _, status := svc.stream(t, "board=global&token="+withAud("alice", "realtime"), ""); status != 401 {
		t.Errorf("stream with a realtime token without the audience lb-test: %d, want 401", status)
	}
	cfg, err := configs.Load(func(k string) string {
		return map[string]string{"LEADERBOARD_JWT_SECRET": testSecret, "LEADERBOARD_JWT_AUDIENCE": "lb-test"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := token(cfg, []string{"-sub", "cli-user"}, &out); err != nil {
		t.Fatal(err)
	}
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/top", strings.TrimSpace(out.String()), ""); r.status != 200 {
		t.Errorf("a token from `leaderboard token`: %d %s, want 200", r.status, r.raw)
	}
	if _, err := configs.Load(func(k string) string {
		return map[string]string{"LEADERBOARD_JWT_AUDIENCE": "realtime"}[k]
	}); err == nil || !strings.Contains(err.Error(), "LEADERBOARD_JWT_AUDIENCE") {
		t.Errorf("LEADERBOARD_JWT_AUDIENCE=realtime: %v, want refused (the realtime tokens' own audience)", err)
	}
}
