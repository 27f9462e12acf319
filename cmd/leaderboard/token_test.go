package main

import (
	"bytes"
	"context"
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
