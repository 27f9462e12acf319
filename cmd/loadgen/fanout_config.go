package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// fanoutConfig is everything `loadgen fanout` reads from its flags.
type fanoutConfig struct {
	Name           string        `json:"name,omitempty"`
	Targets        []string      `json:"targets"`
	Secret         string        `json:"-"`
	Clients        int           `json:"clients"`
	UserPrefix     string        `json:"user_prefix"`
	Board          string        `json:"board"`
	RampRate       float64       `json:"ramp_per_s"`
	ConnectTimeout time.Duration `json:"-"`
	Drive          bool          `json:"drive"`
	Duration       time.Duration `json:"-"`
	LeaderEvery    time.Duration `json:"-"`
	Settle         time.Duration `json:"-"`
	SettleMax      time.Duration `json:"-"`
	BgRate         float64       `json:"background_writes_per_s"`
	BgUsers        int           `json:"background_users"`
	Seed           int           `json:"seed_entries"`
	PollInterval   time.Duration `json:"-"`
	PIDs           []int         `json:"server_pids"`
	SyncDir        string        `json:"sync_dir,omitempty"`
	Peers          int           `json:"peers"`
	SyncTimeout    time.Duration `json:"-"`
	IdleTimeout    time.Duration `json:"-"`
	Out            string        `json:"out"`

	// Durations as strings for the JSON summary.
	DurationS    string `json:"duration"`
	LeaderEveryS string `json:"leader_every"`
	SettleS      string `json:"settle"`
}

func parseFanoutConfig(args []string, getenv func(string) string, out io.Writer) (fanoutConfig, error) {
	var c fanoutConfig
	fs := flag.NewFlagSet("loadgen fanout", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: loadgen fanout -clients N -targets http://a[,http://b] [flags]")
		fmt.Fprintln(out, "Opens N SSE streams (round-robin over the targets), then drives top-10 changes and reports delivery lag.")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.Name, "name", "", "label for this process in the report (two loadgens of one run: a, b)")
	targets := fs.String("targets", "http://127.0.0.1:18080", "comma-separated base URLs of API processes; streams go round-robin, writes and polls to the first")
	fs.StringVar(&c.Secret, "secret", getenv("LEADERBOARD_JWT_SECRET"), "HS256 secret the service verifies tokens with (default $LEADERBOARD_JWT_SECRET)")
	fs.IntVar(&c.Clients, "clients", 1000, "SSE streams to open, one distinct user each")
	fs.StringVar(&c.UserPrefix, "user-prefix", "fan-", "stream user ids are prefix + index")
	fs.StringVar(&c.Board, "board", "global", "board to stream; the drive writes to global, so leave it")
	fs.Float64Var(&c.RampRate, "ramp-rate", 1000, "new connections per second while ramping up")
	fs.DurationVar(&c.ConnectTimeout, "connect-timeout", 10*time.Second, "bound on dial + the answer's headers per stream")
	fs.BoolVar(&c.Drive, "drive", true, "post the leader changes and background writes (false: only listen, for the second loadgen of a split run)")
	fs.DurationVar(&c.Duration, "duration", 20*time.Second, "how long to drive top changes once every stream is open")
	fs.DurationVar(&c.LeaderEvery, "leader-every", 300*time.Millisecond, "one new leader (a new highest score) this often")
	fs.DurationVar(&c.Settle, "settle", 3*time.Second, "after the drive, wait this long before checking which streams hold the latest version")
	fs.DurationVar(&c.SettleMax, "converge-timeout", 30*time.Second, "after the settle, how long to keep waiting for every open stream to hold the latest version (reported as converged after)")
	fs.Float64Var(&c.BgRate, "bg-rate", 20, "background score writes per second during the drive (scores below the top-N; 0: none)")
	fs.IntVar(&c.BgUsers, "bg-users", 1000, "distinct users of the background writes")
	fs.IntVar(&c.Seed, "seed", 100, "entries put above every background score before the drive, so background writes never change the cached top-N; keep >= LEADERBOARD_TOP_N")
	fs.DurationVar(&c.PollInterval, "poll-interval", 25*time.Millisecond, "how often GET /v1/leaderboard/top is polled to learn the versions published")
	pids := fs.String("pids", "", "comma-separated pids of the API processes whose CPU and RSS to report (read from /proc)")
	fs.StringVar(&c.SyncDir, "sync-dir", "", "directory shared by the loadgens of one split run: each marks itself ramped there, the driver marks the drive done")
	fs.IntVar(&c.Peers, "peers", 1, "with -sync-dir: how many loadgens must have ramped before the drive starts")
	fs.DurationVar(&c.SyncTimeout, "sync-timeout", 3*time.Minute, "with -sync-dir: how long to wait for the peers, and a listener for the drive's end")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", 30*time.Second, "before ramping, wait up to this long for the targets' open streams (earlier runs) to reach 0")
	fs.StringVar(&c.Out, "out", "", "write the JSON report to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimRight(strings.TrimSpace(t), "/"); t != "" {
			c.Targets = append(c.Targets, t)
		}
	}
	for _, p := range strings.Split(*pids, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return c, fmt.Errorf("-pids: %q is not a pid", p)
		}
		c.PIDs = append(c.PIDs, n)
	}
	c.DurationS, c.LeaderEveryS, c.SettleS = c.Duration.String(), c.LeaderEvery.String(), c.Settle.String()
	return c, c.validate()
}

func (c fanoutConfig) validate() error {
	var errs []error
	if len(c.Secret) < 16 {
		errs = append(errs, errors.New("-secret (or LEADERBOARD_JWT_SECRET): want at least 16 characters"))
	}
	if len(c.Targets) == 0 {
		errs = append(errs, errors.New("-targets: want at least one base URL"))
	}
	for _, t := range c.Targets {
		if _, err := streamURL(t, c.Board); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Clients < 1 {
		errs = append(errs, errors.New("-clients: want at least 1"))
	}
	if len(c.UserPrefix)+7 > 64 {
		errs = append(errs, errors.New("-user-prefix: too long for a 64-character user id"))
	}
	if c.RampRate <= 0 || c.ConnectTimeout <= 0 || c.Duration <= 0 || c.LeaderEvery <= 0 || c.PollInterval <= 0 {
		errs = append(errs, errors.New("-ramp-rate, -connect-timeout, -duration, -leader-every and -poll-interval must be positive"))
	}
	if c.Settle < 0 || c.SettleMax < 0 || c.BgRate < 0 || c.Seed < 0 || c.BgUsers < 1 || c.Peers < 1 {
		errs = append(errs, errors.New("-settle, -converge-timeout, -bg-rate and -seed must not be negative; -bg-users and -peers must be positive"))
	}
	if c.Peers > 1 && c.SyncDir == "" {
		errs = append(errs, errors.New("-peers above 1 needs -sync-dir"))
	}
	return errors.Join(errs...)
}
