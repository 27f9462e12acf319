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
