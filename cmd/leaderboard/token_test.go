package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/openleaderboard/leaderboard/configs"
	lbhttp "github.com/openleaderboard/leaderboard/http"
)

// TestTokenRoles: `token -roles` takes the roles comma-separated, spaces around them
// allowed ("server, admin" made the role " admin", silently no admin), and refuses a role
// the service does not know.
func TestTokenRoles(t *testing.T) {
	t.Parallel()
	noEnv := func(string) string { return "" } // the development secret
	for roles, want := range map[string]string{"": "", "admin": "admin", "server, admin": "server,admin", " server ,": "server"} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"token", "-sub", "ops", "-roles", roles}, noEnv, &out); err != nil {
			t.Fatalf("-roles %q: %v", roles, err)
		}
		var c lbhttp.Claims
		if _, err := jwt.ParseWithClaims(strings.TrimSpace(out.String()), &c, func(*jwt.Token) (any, error) { return []byte(configs.DevJWTSecret), nil }); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(c.Roles, ","); got != want {
			t.Errorf("-roles %q: roles %q, want %q", roles, got, want)
		}
	}
	if err := run(context.Background(), []string{"token", "-roles", "superuser"}, noEnv, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "superuser") {
		t.Errorf("-roles superuser: %v, want a refusal naming the role", err)
	}
}

// TestBearerSchemeIsCaseInsensitive: API.md "Auth: `Authorization: Bearer <JWT>`".
// The scheme of an Authorization header is case-insensitive (RFC 9110 11.1, RFC 6750 uses
// the token_type "bearer" OAuth servers return, which many clients copy verbatim); the
// service refuses "bearer <JWT>" and "BEARER <JWT>" with 401 "missing bearer token".
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	tok := mintToken(t, "alice")
	for _, scheme := range []string{"bearer", "BEARER"} {
		req, err := http.NewRequest(http.MethodPost, svc.base+"/v1/scores", strings.NewReader(`{"score": 3}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", scheme+" "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Errorf("Authorization: %s <valid JWT>: got %d, want 202", scheme, resp.StatusCode)
		}
	}
}

// TestTokenPrivilegedRolesNeedTheirOwnSub: `leaderboard token -roles admin` (or
// server) without -sub signs the privileged token for the default player "player-1". That
// token then also is player-1's credential (it submits, reads /me and opens streams as that
// player; with the server role, unrate-limited), and every admin action is written to the
// audit trail with actor "player-1", a player's id. Without -sub the command refuses a
// privileged token (found by a review of deployment defaults).
func TestTokenPrivilegedRolesNeedTheirOwnSub(t *testing.T) {
	t.Parallel()
	noEnv := func(string) string { return "" } // the development secret, on loopback
	for _, roles := range []string{"admin", "server", "server,admin"} {
		var out bytes.Buffer
		err := run(context.Background(), []string{"token", "-roles", roles}, noEnv, &out)
		if err != nil {
			if !strings.Contains(err.Error(), "-sub") {
				t.Errorf("-roles %s without -sub: %v, want a refusal asking for -sub", roles, err)
			}
			continue
		}
		var c lbhttp.Claims
		if _, err := jwt.ParseWithClaims(strings.TrimSpace(out.String()), &c, func(*jwt.Token) (any, error) { return []byte(configs.DevJWTSecret), nil }); err != nil {
			t.Fatalf("-roles %s: %v", roles, err)
		}
		if c.Subject == "player-1" {
			t.Errorf("token -roles %s without -sub signed a %s token for the default player %q: it acts as that player too and the audit trail names a player", roles, roles, c.Subject)
		}
	}
}
