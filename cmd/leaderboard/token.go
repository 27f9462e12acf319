package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/openleaderboard/leaderboard/configs"
	lbhttp "github.com/openleaderboard/leaderboard/http"
	"github.com/openleaderboard/leaderboard/messages"
)

// token prints a bearer token signed with the configured secret, for trying the API.
func token(cfg configs.Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stdout)
	sub := fs.String("sub", "player-1", "user id (sub claim)")
	name := fs.String("name", "", "display name (name claim)")
	roles := fs.String("roles", "", "comma-separated roles: server, admin")
	ttl := fs.Duration("ttl", time.Hour, "lifetime")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !messages.ValidUserID(*sub) {
		return fmt.Errorf("token: -sub must be 1 to 64 of [A-Za-z0-9_.:-]")
	}
	// Under roles without the API, configs neither checks nor keeps the secret (nothing
	// there verifies tokens): a token is signed with the key the API checks, or not at all.
	if !cfg.UsesDevSecret() && len(cfg.JWTSecret) < configs.MinJWTSecretBytes {
		return fmt.Errorf("token: LEADERBOARD_JWT_SECRET must be the API's secret (at least %d bytes), got %d bytes", configs.MinJWTSecretBytes, len(cfg.JWTSecret))
	}
	if *ttl <= 0 || *ttl > cfg.JWTMaxTTL {
		return fmt.Errorf("token: -ttl must be positive and at most LEADERBOARD_JWT_MAX_TTL (%v): the service refuses longer-lived tokens", cfg.JWTMaxTTL)
	}
	now := time.Now()
	claims := lbhttp.Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: *sub, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(*ttl))},
		Name:             *name,
	}
	for _, r := range strings.Split(*roles, ",") {
		switch r = strings.TrimSpace(r); r {
		case "":
		case "server", "admin":
			claims.Roles = append(claims.Roles, r)
		default:
			return fmt.Errorf("token: -roles: unknown role %q (want server, admin or both, comma-separated)", r)
		}
	}
	named := false
	fs.Visit(func(f *flag.Flag) { named = named || f.Name == "sub" })
	if len(claims.Roles) > 0 && !named {
		// The default is a player's id: a privileged token would act as that player too,
		// and the audit trail would name a player as the actor.
		return fmt.Errorf("token: -roles needs -sub naming the token's holder (for example -sub ops or -sub game-server-1)")
	}
	if cfg.JWTAudience != "" {
		claims.Audience = jwt.ClaimStrings{cfg.JWTAudience}
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(cfg.JWTSecret))
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	if cfg.UsesDevSecret() { // on stderr: $(leaderboard token) takes the token alone
		fmt.Fprintln(os.Stderr, "leaderboard token: signed with the development secret (LEADERBOARD_JWT_SECRET is not set); a service with a secret of its own refuses it")
	}
	_, err = fmt.Fprintln(stdout, signed)
	return err
}
