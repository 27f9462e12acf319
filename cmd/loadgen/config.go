package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// config is everything loadgen reads from its flags.
type config struct {
	Target       string        `json:"target"`
	Secret       string        `json:"-"`
	Users        int           `json:"users"`
	UserPrefix   string        `json:"user_prefix"`
	Rate         float64       `json:"rate"`
	Duration     time.Duration `json:"-"`
	MaxInflight  int           `json:"max_inflight"`
	Concurrency  int           `json:"concurrency"`
	ReadDuration time.Duration `json:"-"`
	ReqTimeout   time.Duration `json:"-"`
	VisTimeout   time.Duration `json:"-"`
	DrainTimeout time.Duration `json:"-"`
	PollInterval time.Duration `json:"-"`
	PollChunk    int           `json:"poll_chunk"`
	Postgres     string        `json:"postgres"`
	Redis        string        `json:"redis"`
	Prefix       string        `json:"redis_prefix"`
	Phases       []string      `json:"phases"`
	Check        bool          `json:"check"`
	Out          string        `json:"out"`

	// Durations as strings for the JSON summary.
	DurationS     string `json:"duration"`
	ReadDurationS string `json:"read_duration"`
	VisTimeoutS   string `json:"visibility_timeout"`
}

const (
	phaseRate       = "rate"
	phaseSaturation = "saturation"
	phaseReads      = "reads"
)

func parseConfig(args []string, getenv func(string) string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.Target, "target", "http://127.0.0.1:18080", "base URL of the service")
	fs.StringVar(&c.Secret, "secret", getenv("LEADERBOARD_JWT_SECRET"), "HS256 secret the service verifies tokens with (default $LEADERBOARD_JWT_SECRET)")
	fs.IntVar(&c.Users, "users", 20000, "number of distinct users")
	fs.StringVar(&c.UserPrefix, "user-prefix", "bench-u-", "user id prefix (ids are prefix + 6 digits)")
	fs.Float64Var(&c.Rate, "rate", 10000, "phase A: offered submissions per second (open loop)")
	fs.DurationVar(&c.Duration, "duration", 60*time.Second, "length of each write phase")
	fs.IntVar(&c.MaxInflight, "max-inflight", 2000, "phase A: bound on in-flight requests; sends over it are dropped and counted")
	fs.IntVar(&c.Concurrency, "concurrency", 128, "phase B and reads: closed-loop workers")
	fs.DurationVar(&c.ReadDuration, "read-duration", 15*time.Second, "length of each read sub-phase (top-10, then user rank)")
	fs.DurationVar(&c.ReqTimeout, "request-timeout", 30*time.Second, "HTTP client timeout per request")
	fs.DurationVar(&c.VisTimeout, "visibility-timeout", 30*time.Second, "after a write phase, how long accepted scores may take to show in Redis")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 10*time.Minute, "after each write phase and before the exactly-once check: how long to wait for the pipeline to apply every accepted score")
	fs.DurationVar(&c.PollInterval, "poll-interval", 5*time.Millisecond, "visibility poller period")
	fs.IntVar(&c.PollChunk, "poll-chunk", 500, "visibility poller: hash fields per HMGET (8 HMGETs are pipelined per round trip)")
	fs.StringVar(&c.Postgres, "postgres", "postgres://postgres@127.0.0.1:5432/leaderboard_bench?sslmode=disable", "PostgreSQL URL of the service's database")
	fs.StringVar(&c.Redis, "redis", "redis://127.0.0.1:6379/0", "Redis URL of the service")
	fs.StringVar(&c.Prefix, "prefix", getenv("LEADERBOARD_REDIS_PREFIX"), "the service's LEADERBOARD_REDIS_PREFIX (default $LEADERBOARD_REDIS_PREFIX)")
	phases := fs.String("phases", "rate,saturation,reads", "comma-separated phases to run: rate, saturation, reads")
	fs.BoolVar(&c.Check, "check", true, "run the exactly-once check at the end")
	fs.StringVar(&c.Out, "out", "", "write the JSON summary to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	for _, p := range strings.Split(*phases, ",") {
		switch p = strings.TrimSpace(p); p {
		case phaseRate, phaseSaturation, phaseReads:
			c.Phases = append(c.Phases, p)
		case "":
		default:
			return c, fmt.Errorf("-phases: unknown phase %q", p)
		}
	}
	c.Target = strings.TrimRight(c.Target, "/")
	c.DurationS, c.ReadDurationS, c.VisTimeoutS = c.Duration.String(), c.ReadDuration.String(), c.VisTimeout.String()
	return c, c.validate()
}

func (c config) validate() error {
	var errs []error
	if len(c.Secret) < 16 {
		errs = append(errs, errors.New("-secret (or LEADERBOARD_JWT_SECRET): want at least 16 characters"))
	}
	if c.Prefix == "" {
		errs = append(errs, errors.New("-prefix (or LEADERBOARD_REDIS_PREFIX): required, the service's Redis key prefix"))
	}
	if c.Users < 1 || c.Users > 999999 {
		errs = append(errs, errors.New("-users: want 1 to 999999"))
	}
	if c.Rate <= 0 || c.Duration <= 0 || c.ReadDuration <= 0 {
		errs = append(errs, errors.New("-rate, -duration and -read-duration must be positive"))
	}
	if c.MaxInflight < 1 || c.Concurrency < 1 || c.PollChunk < 1 {
		errs = append(errs, errors.New("-max-inflight, -concurrency and -poll-chunk must be positive"))
	}
	return errors.Join(errs...)
}

func (c config) runs(phase string) bool { return slices.Contains(c.Phases, phase) }
