package configs_test

import (
	"testing"

	"github.com/openleaderboard/leaderboard/configs"
)

// TestJWTSecretOnlyWhereTokensAreChecked: the JWT secret mints any token, admin included,
// and only API processes verify tokens: compose gives it to the API replicas only, and the
// relay and the projector start without it (they listen off loopback for their health
// checks and Prometheus; they refused to start without a real secret, so compose gave it
// to them too. Found by a review).
func TestJWTSecretOnlyWhereTokensAreChecked(t *testing.T) {
	p := loadCompose(t)
	for _, name := range []string{"api-1", "api-2"} {
		if v := p.Services[name].Environment["LEADERBOARD_JWT_SECRET"]; v == nil || *v == "" {
			t.Errorf("compose gives %s no LEADERBOARD_JWT_SECRET", name)
		}
	}
	for _, name := range []string{"relay", "projector"} {
		s := p.Services[name]
		if v := s.Environment["LEADERBOARD_JWT_SECRET"]; v != nil && *v != "" {
			t.Errorf("compose gives %s (which verifies no token) LEADERBOARD_JWT_SECRET", name)
		}
		env := map[string]string{}
		for k, v := range s.Environment {
			if v != nil && k != "LEADERBOARD_JWT_SECRET" {
				env[k] = *v
			}
		}
		if _, err := configs.Load(func(k string) string { return env[k] }); err != nil {
			t.Errorf("%s cannot start without the JWT secret: %v", name, err)
		}
	}
}
