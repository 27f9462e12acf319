package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
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
	Window       time.Duration `json:"-"`
	PollChunk    int           `json:"poll_chunk"`
	PollMaxReads int           `json:"poll_max_reads"`
	// NetHTTPWrites sends the write phases' POSTs through net/http's client instead of
	// the raw poster (rawhttp.go).
	NetHTTPWrites bool     `json:"net_http_writes"`
	VisSample     float64  `json:"visibility_sample"`
	Postgres      string   `json:"postgres"`
	Redis         string   `json:"redis"`
	CPUProfile    string   `json:"-"`
	Prefix        string   `json:"redis_prefix"`
	Phases        []string `json:"phases"`
	Check         bool     `json:"check"`
	Out           string   `json:"out"`

	MixedRate    float64       `json:"mixed_rate"`
	Mix          mix           `json:"-"`
	MatchSize    int           `json:"match_size"`
	BigBoard     string        `json:"big_board"`
	BigEntries   int           `json:"big_entries"`
	IdleDuration time.Duration `json:"-"`
	ServicePID   int           `json:"service_pid,omitempty"`
	// LimiterDuration is each setting's total time in the limiter phase (off and on, each
	// run limiterRounds times for LimiterDuration / limiterRounds).
	LimiterDuration time.Duration `json:"-"`

	// Durations as strings for the JSON summary.
	DurationS     string `json:"duration"`
	ReadDurationS string `json:"read_duration"`
	VisTimeoutS   string `json:"visibility_timeout"`
	IdleDurationS string `json:"idle_duration"`
	WindowS       string `json:"window"`
	LimiterDurS   string `json:"limiter_duration"`
	MixS          string `json:"mix"`
}

const (
	phaseRate       = "rate"
	phaseSaturation = "saturation"
	phaseLimiter    = "limiter"
	phaseMixed      = "mixed"
	phaseReads      = "reads"
	phaseBigReads   = "bigreads"
)

// allPhases are the phases in the order they run.
var allPhases = []string{phaseRate, phaseSaturation, phaseLimiter, phaseMixed, phaseReads, phaseBigReads}

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
	fs.IntVar(&c.Concurrency, "concurrency", 128, "phase B, limiter and reads: closed-loop workers")
	fs.DurationVar(&c.ReadDuration, "read-duration", 15*time.Second, "length of each read sub-phase (top-10, then user rank)")
	fs.DurationVar(&c.ReqTimeout, "request-timeout", 30*time.Second, "HTTP client timeout per request")
	fs.DurationVar(&c.VisTimeout, "visibility-timeout", 30*time.Second, "after a write phase, how long accepted scores may take to show in Redis")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 10*time.Minute, "after each write phase and before the exactly-once check: how long to wait for the pipeline to apply every accepted score")
	fs.DurationVar(&c.Window, "window", 10*time.Second, "write phases: accepted and applied commands are reported per window of this length (the rate of an open-loop phase holds when every window applied >= 90 % of what it accepted)")
	fs.DurationVar(&c.PollInterval, "poll-interval", 5*time.Millisecond, "visibility poller period")
	fs.BoolVar(&c.NetHTTPWrites, "net-http-writes", false, "send the write phases' POSTs through net/http's client (more CPU in the load generator) instead of plain keep-alive HTTP/1.1 connections")
	fs.IntVar(&c.PollMaxReads, "poll-max-reads", 20000, "visibility poller: at most this many users read a second (a cycle of n users waits at least n/this s before the next; 0: no bound)")
	fs.IntVar(&c.PollChunk, "poll-chunk", 500, "visibility poller: users per chunk (8 chunks are read per poll, in three pipelined round trips)")
	fs.Float64Var(&c.VisSample, "visibility-sample", 0.1, "share of accepted commands whose accept -> visible time is measured (drawn at random; 1: every one). The poller's reads load Redis and loadgen in proportion, and they count in the CPU per event; the exactly-once check covers every command whatever the sample")
	fs.StringVar(&c.Postgres, "postgres", "postgres://postgres@127.0.0.1:5432/leaderboard_bench?sslmode=disable", "PostgreSQL URL of the service's database")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write the load generator's own CPU profile (go tool pprof) to this file")
	fs.StringVar(&c.Redis, "redis", "redis://127.0.0.1:6379/0", "Redis URL of the service")
	fs.StringVar(&c.Prefix, "prefix", getenv("LEADERBOARD_REDIS_PREFIX"), "the service's LEADERBOARD_REDIS_PREFIX (default $LEADERBOARD_REDIS_PREFIX)")
	phases := fs.String("phases", strings.Join(allPhases, ","), "comma-separated phases to run (they run in this order whatever the order given): "+strings.Join(allPhases, ", "))
	fs.Float64Var(&c.MixedRate, "mixed-rate", 0, "mixed phase: offered commands per second, open loop (default: -rate)")
	mixFlag := fs.String("mix", "best=1,incr=1,match=1", "mixed phase: weights of the kinds of command: best (POST /v1/scores), incr (POST /v1/scores/increment), match (POST /v1/matches/{id}/users/{user}/point); a kind left out weighs 0")
	fs.IntVar(&c.MatchSize, "match-size", 10, "mixed phase: players per match (user i plays in match i / match-size)")
	fs.StringVar(&c.BigBoard, "big-board", "big", "bigreads: the board to bulk-seed and read (operator best, order desc, period all_time, defined in the service's boards file); the exactly-once check ignores it")
	fs.IntVar(&c.BigEntries, "big-entries", 1000000, "bigreads: entries to seed on -big-board")
	fs.DurationVar(&c.IdleDuration, "idle-duration", 10*time.Second, "before the first write phase: how long to measure the processes' CPU with no load (0: skip)")
	fs.DurationVar(&c.LimiterDuration, "limiter-duration", 20*time.Second, "limiter phase: closed-loop time per setting (limiter off: server token; on: a player token per user), run as off, on, on, off of half of it each")
	fs.IntVar(&c.ServicePID, "service-pid", 0, "the service's process id, for its CPU time (0: not measured)")
	fs.BoolVar(&c.Check, "check", true, "run the exactly-once check at the end")
	fs.StringVar(&c.Out, "out", "", "write the JSON summary to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	for _, p := range strings.Split(*phases, ",") {
		switch p = strings.TrimSpace(p); {
		case slices.Contains(allPhases, p):
			c.Phases = append(c.Phases, p)
		case p == "":
		default:
			return c, fmt.Errorf("-phases: unknown phase %q (want %s)", p, strings.Join(allPhases, ", "))
		}
	}
	m, err := parseMix(*mixFlag)
	if err != nil {
		return c, fmt.Errorf("-mix: %w", err)
	}
	c.Mix, c.MixS = m, m.String()
	if c.MixedRate == 0 {
		c.MixedRate = c.Rate
	}
	c.Target = strings.TrimRight(c.Target, "/")
	c.DurationS, c.ReadDurationS, c.VisTimeoutS = c.Duration.String(), c.ReadDuration.String(), c.VisTimeout.String()
	c.IdleDurationS, c.LimiterDurS, c.WindowS = c.IdleDuration.String(), c.LimiterDuration.String(), c.Window.String()
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
	if c.MixedRate < 0 || c.IdleDuration < 0 || c.ServicePID < 0 || c.PollMaxReads < 0 {
		errs = append(errs, errors.New("-mixed-rate, -idle-duration, -service-pid and -poll-max-reads must not be negative"))
	}
	if !(c.VisSample > 0 && c.VisSample <= 1) {
		errs = append(errs, errors.New("-visibility-sample: want more than 0 and at most 1"))
	}
	if c.Window < time.Second {
		errs = append(errs, errors.New("-window: want at least 1s"))
	}
	if c.LimiterDuration < time.Second {
		errs = append(errs, errors.New("-limiter-duration: want at least 1s"))
	}
	if c.MatchSize < 1 {
		errs = append(errs, errors.New("-match-size: want at least 1"))
	}
	if c.BigEntries < 1 || c.BigEntries > 99_999_999 {
		errs = append(errs, errors.New("-big-entries: want 1 to 99999999"))
	}
	if c.BigBoard == "" || c.BigBoard == globalBoard || c.BigBoard == pointsBoard || c.BigBoard == dailyBoard || c.BigBoard == seasonBoard {
		errs = append(errs, fmt.Errorf("-big-board: %q: want a board of its own", c.BigBoard))
	}
	return errors.Join(errs...)
}

func (c config) runs(phase string) bool { return slices.Contains(c.Phases, phase) }

// mix is the weight of each kind of command in the mixed phase.
type mix [numKinds]float64

// parseMix reads "best=1,incr=1,match=1"; a kind left out weighs 0, and at least one must
// weigh more.
func parseMix(s string) (mix, error) {
	var m mix
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, raw, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if !ok {
			return m, fmt.Errorf("%q: want kind=weight", part)
		}
		i := slices.Index(kindNames[:], name)
		if i < 0 {
			return m, fmt.Errorf("%q: unknown kind (want best, incr or match)", name)
		}
		if seen[name] {
			return m, fmt.Errorf("%q: given twice", name)
		}
		seen[name] = true
		w, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || w < 0 || math.IsInf(w, 0) || math.IsNaN(w) {
			return m, fmt.Errorf("%q: want a weight of 0 or more", part)
		}
		m[i] = w
	}
	if m.total() <= 0 {
		return m, errors.New("want at least one kind with a positive weight, e.g. best=1,incr=1,match=1")
	}
	return m, nil
}

func (m mix) total() float64 {
	var t float64
	for _, w := range m {
		t += w
	}
	return t
}

// pick maps x in [0, 1) to a kind, each with a probability of its weight's share.
func (m mix) pick(x float64) kind {
	x *= m.total()
	last := kindBest
	for k, w := range m {
		if w <= 0 {
			continue
		}
		last = kind(k)
		if x < w {
			return kind(k)
		}
		x -= w
	}
	return last // rounding
}

func (m mix) String() string {
	parts := make([]string, 0, numKinds)
	for k, w := range m {
		parts = append(parts, kindNames[k]+"="+strconv.FormatFloat(w, 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}
