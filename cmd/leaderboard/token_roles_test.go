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

// TestTokenUnderANonAPIRole: `leaderboard token` in an environment whose LEADERBOARD_ROLES
// names no api (a relay's or a projector's shell, `docker compose exec relay leaderboard
// token`), with LEADERBOARD_JWT_SECRET unset or too short, signs with the development
// secret the API checks or refuses; it never signs with an empty or short key (it printed
// a token signed with an empty key, which no API accepts. Found by a review).
func TestTokenUnderANonAPIRole(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ roles, secret string }{
		{"relay", ""}, {"projector", ""}, {"relay,projector", ""}, // the development secret
		{"relay", "short-secret"},
	} {
		roles := c.roles
		env := func(k string) string {
			switch k {
			case "LEADERBOARD_ROLES":
				return c.roles
			case "LEADERBOARD_JWT_SECRET":
				return c.secret
			}
			return ""
		}
		var out bytes.Buffer
		err := run(context.Background(), []string{"token", "-sub", "ops", "-roles", "admin"}, env, &out)
		if err != nil {
			continue // a refusal is fine
		}
		var c lbhttp.Claims
		if _, perr := jwt.ParseWithClaims(strings.TrimSpace(out.String()), &c, func(*jwt.Token) (any, error) { return []byte(configs.DevJWTSecret), nil }); perr != nil {
			_, emptyErr := jwt.ParseWithClaims(strings.TrimSpace(out.String()), &lbhttp.Claims{}, func(*jwt.Token) (any, error) { return []byte{}, nil })
			t.Errorf("LEADERBOARD_ROLES=%s: token printed without error, but the development secret does not verify it (%v); verifies with an empty key: %v", roles, perr, emptyErr == nil)
		}
	}
}
