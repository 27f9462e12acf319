package main

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/openleaderboard/leaderboard/configs"
	lbhttp "github.com/openleaderboard/leaderboard/http"
)

// TestDevSecretBehindLocalReverseProxy: under the published development secret a request
// a proxy forwarded is refused, whichever header says so, though it names a loopback Host
// (nginx's default proxy_pass http://127.0.0.1:8080 does): a reverse proxy on the same
// machine would otherwise let anyone mint an admin token with the published secret. The
// same request not forwarded is answered. (Found by a review.)
func TestDevSecretBehindLocalReverseProxy(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(map[string]string{"LEADERBOARD_JWT_SECRET": ""})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(svc.base, "http://"))
	admin := signTokenWith(t, configs.DevJWTSecret, lbhttp.Claims{Roles: []string{"admin"},
		RegisteredClaims: jwt.RegisteredClaims{Subject: "attacker", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}})
	for _, c := range []struct{ header, value string }{
		{"", ""},
		{"X-Forwarded-For", "203.0.113.9"},
		{"X-Real-IP", "203.0.113.9"},
		{"Forwarded", "for=203.0.113.9;proto=https;host=leaderboard.example.com"},
		{"X-Forwarded-Host", "leaderboard.example.com"},
		// Proxies and CDNs that add none of those (found by a later review).
		{"Via", "1.1 proxy"},
		{"X-Forwarded-Proto", "https"},
		{"CF-Connecting-IP", "203.0.113.9"},
		{"True-Client-IP", "203.0.113.9"},
		{"X-Original-Forwarded-For", "203.0.113.9"},
	} {
		req, _ := http.NewRequest(http.MethodGet, svc.base+"/admin/audit", nil)
		req.Host = "127.0.0.1:" + port // what nginx's proxy_pass sends by default
		if c.header != "" {
			req.Header.Set(c.header, c.value)
		}
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := http.StatusForbidden
		if c.header == "" {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("%s %q with an admin token signed by the published development secret: %d, want %d", c.header, c.value, resp.StatusCode, want)
		}
	}
}
