// Command leaderboard runs the leaderboard service: the HTTP API, the outbox relay and
// the projector, in one process or split by LEADERBOARD_ROLES.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rcrowley/go-metrics"
)

func main() {
	// Sarama records client metrics in go-metrics on every request; the service exports
	// its own Prometheus metrics, so that work is switched off.
	metrics.UseNilMetrics = true
	setGCDefaults(os.Getenv, os.ReadFile)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { // once told to stop, a second signal ends the process at once
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "leaderboard:", err)
		os.Exit(1)
	}
}

// usage is printed for unknown subcommands.
func usage(w io.Writer) {
	fmt.Fprintln(w, `usage: leaderboard [serve|healthcheck|token|rebuild|consistency|broker]
  serve        run the roles in LEADERBOARD_ROLES (default)
  healthcheck  exit 0 when GET /readyz on LEADERBOARD_HTTP_ADDR answers 200
  token        print a bearer token signed with LEADERBOARD_JWT_SECRET
               (-sub user -name "Display Name" -roles server,admin -ttl 1h)
  rebuild      rebuild a board's Redis state from PostgreSQL (-board global)
  consistency  compare a board in Redis with PostgreSQL (-board global -full -sample 1000);
               exits 1 when they differ
  broker       run the in-process Kafka-protocol broker alone, for development and tests
               (-addr 127.0.0.1:9092 -data-dir .data/kafka-broker); production uses Apache Kafka`)
}
