package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/router"
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
	case "broker": // needs no configuration
		return broker(ctx, args[1:], stdout)
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

// broker runs the embedded Kafka-protocol broker (kfake) alone until ctx ends: an external
// broker for development and for tests that stop and restart it.
func broker(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	fs.SetOutput(stdout)
	addr := fs.String("addr", "127.0.0.1:9092", "listen address")
	dataDir := fs.String("data-dir", ".data/kafka-broker", "where topics, offsets and messages persist")
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, portStr, err := net.SplitHostPort(*addr)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil {
		return fmt.Errorf("broker: -addr %q: want host:port", *addr)
	}
	b, err := router.StartEmbeddedKafka(*dataDir, port)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "kafka-protocol broker on %v (data in %s)\n", b.Addrs(), *dataDir)
	<-ctx.Done()
	b.Close()
	return nil
}
