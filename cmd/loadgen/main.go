// Command loadgen drives a running leaderboard service over HTTP and reports throughput,
// accept latency, accept-to-Redis visibility latency and read latency, then checks that
// every accepted score was applied exactly once (PostgreSQL and Redis).
//
// It is what `make bench` (scripts/bench.sh) runs against a freshly started service:
//
//	loadgen -target http://127.0.0.1:18080 -secret $LEADERBOARD_JWT_SECRET \
//	    -postgres postgres://postgres@127.0.0.1:5432/leaderboard_bench?sslmode=disable \
//	    -redis redis://127.0.0.1:6379/0 -prefix bench-1700000000 -out summary.json
//
// `loadgen fanout` is the realtime side (scripts/bench-fanout.sh): it opens N SSE streams,
// drives top-10 changes and reports delivery lag, the share of events delivered, and the
// API processes' CPU and memory:
//
//	loadgen fanout -clients 18000 -targets http://127.0.0.1:18180 -pids 4242 -out fanout.json
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		if errors.Is(err, errCheckFailed) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// errCheckFailed is returned when the exactly-once check finds a difference.
var errCheckFailed = errors.New("exactly-once check FAILED")

// run parses the flags, runs the phases in order and writes the report; `fanout` as the
// first argument runs the fan-out benchmark instead.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "fanout" {
		return runFanout(ctx, args[1:], getenv, stdout)
	}
	cfg, err := parseConfig(args, getenv, stdout)
	if err != nil {
		return err
	}
	// Every send allocates: collect less often (there is memory), so the load generator
	// leaves more of the shared cores to what it measures.
	debug.SetGCPercent(400)
	b, err := newBench(ctx, cfg, stdout)
	if err != nil {
		return err
	}
	defer b.close()
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	return b.run(ctx)
}
