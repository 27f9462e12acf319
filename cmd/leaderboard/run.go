package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
)

// run is the whole program; main only wires signals and the environment into it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return runWith(ctx, args, getenv, stdout, time.Now)
}

// runWith is run with the clock that decides periods and resets (tests move it across
// midnight); tokens are always checked against the real clock.
func runWith(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, now func() time.Time) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	switch cmd {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return nil
	}
	cfg, err := configs.Load(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	switch cmd {
	case "serve":
		return serve(ctx, cfg, newLogger(cfg, stdout), now)
	case "healthcheck":
		return healthcheck(ctx, cfg)
	case "token":
		return token(cfg, args[1:], stdout)
	case "rebuild", "consistency":
		return maintenance(ctx, cfg, cmd, args[1:], stdout, now)
	default:
		usage(stdout)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

func newLogger(cfg configs.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

func healthcheck(ctx context.Context, cfg configs.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+cfg.HTTPAddr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz answered %s", resp.Status)
	}
	return nil
}
