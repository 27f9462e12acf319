package configs_test

import (
	"context"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"

	"github.com/openleaderboard/leaderboard/configs"
)

// TestJWTSecretOnlyWhereTokensAreChecked: the JWT secret mints any token, admin included,
// and only API processes verify tokens: compose gives it to the API replicas only, and the
// relay and the projector start without it (they listen off loopback for their health
// checks and Prometheus; they refused to start without a real secret, so compose gave it
// to them too. Found by a review).
func TestJWTSecretOnlyWhereTokensAreChecked(t *testing.T) {
	opts, err := cli.NewProjectOptions([]string{"../compose.yaml"},
		cli.WithWorkingDirectory(".."), cli.WithName("leaderboard"),
		cli.WithEnv([]string{"LEADERBOARD_JWT_SECRET=compose-test-secret-0123456789-abcd"}), cli.WithInterpolation(true))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatal(err)
	}
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
