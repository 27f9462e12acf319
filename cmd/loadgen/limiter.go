package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The limiter phase measures what the per-user rate limiter (LEADERBOARD_RATE_LIMIT, a GCRA
// in Redis: one script call per player write) costs on the write path: closed-loop best
// scores on global as in phase B, alternately with the server token (server writes skip
// the limiter) and with each user's own player token (every write spends its user's
// budget). The service must run with a limit no run reaches (scripts/bench.sh:
// BENCH_RATE_LIMIT, default 100000/1s), so that the limiter does its whole work and
// refuses nothing.

// Settings of the limiter phase.
const (
	limiterOff = "off"
	limiterOn  = "on"
)

// limiterRounds is how many times the off and on runs alternate; each run lasts
// -limiter-duration / limiterRounds, so each setting gets -limiter-duration in all.
const limiterRounds = 2

// limiterTargetPct is the most the limiter may cost of the accept throughput.
const limiterTargetPct = 10.0

// limiterRun is one closed-loop run of the limiter phase.
type limiterRun struct {
	setting string // limiterOff or limiterOn
	round   int    // 1-based
	rounds  int
	d       time.Duration
}

func (r limiterRun) name() string {
	return fmt.Sprintf("limiter %s %d/%d", r.setting, r.round, r.rounds)
}

// limiterSchedule is the runs of the limiter phase: each setting's total d cut into rounds
// runs, in the order off, on, on, off, off, on...: a drift over the phase (the tables grow,
// the machine gets busier) then falls on both settings alike. Alternating off, on, off, on
// put every "on" run after its "off" run, so a steady slowdown read as the limiter's cost.
func limiterSchedule(d time.Duration, rounds int) []limiterRun {
	if rounds < 1 {
		return nil
	}
	per := d / time.Duration(rounds)
	runs := make([]limiterRun, 0, 2*rounds)
	for i := 1; i <= rounds; i++ {
		off, on := limiterRun{limiterOff, i, rounds, per}, limiterRun{limiterOn, i, rounds, per}
		if i%2 == 0 {
			off, on = on, off // on first in even rounds
		}
		runs = append(runs, off, on)
	}
	return runs
}

// limiterResult is one finished run: its write phase and the Redis script calls
// (EVAL/EVALSHA/FCALL, all clients) from its start until it drained.
type limiterResult struct {
	run       limiterRun
	ph        *writePhase
	scripts   int64
	scriptsOK bool
}

// limiterPhase is the limiter phase's runs, in the order they ran.
type limiterPhase struct {
	runs []limiterResult
}

// runLimiter runs the limiter phase's schedule; every run is a write phase of its own
// (printed, waited for in Redis and settled as the others, its 202s in the ledger).
func (b *bench) runLimiter(ctx context.Context) *limiterPhase {
	lp := &limiterPhase{}
	players := newPlayerTokens(b.cfg.Secret, nil)
	for _, run := range limiterSchedule(b.cfg.LimiterDuration, limiterRounds) {
		if ctx.Err() != nil {
			break
		}
		ph := &writePhase{name: run.name(), mode: "closed loop"}
		how := "server token: writes skip the limiter"
		if run.setting == limiterOn {
			ph.players = players
			how = "a player token per user (sub = the user): every write spends its user's budget"
		}
		fmt.Fprintf(b.out, "%s: %d closed-loop writers for %s, %s\n", run.name(), b.cfg.Concurrency, run.d, how)
		s0, err0 := b.scriptCalls(ctx)
		b.closedLoop(ctx, ph, run.d)
		b.writePhase(ctx, ph)
		s1, err1 := b.scriptCalls(ctx)
		res := limiterResult{run: run, ph: ph, scripts: s1 - s0, scriptsOK: err0 == nil && err1 == nil}
		lp.runs = append(lp.runs, res)
		if run.setting == limiterOn {
			fmt.Fprintf(b.out, "  player tokens minted so far: %d\n", players.minted.Load())
		}
	}
	return lp
}

// scriptCalls is Redis's count of script calls since its start (INFO commandstats).
func (b *bench) scriptCalls(ctx context.Context) (int64, error) {
	info, err := b.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	return parseScriptCalls(info), nil
}

// scriptCommands are the commandstats entries of script calls (the limiter's GCRA runs
// as EVALSHA, or EVAL when Redis lost the script).
var scriptCommands = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

// parseScriptCalls sums the calls of the script commands in INFO commandstats
// ("cmdstat_evalsha:calls=12,usec=...").
func parseScriptCalls(info string) int64 {
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		cmd, isStat := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isStat || !slices.Contains(scriptCommands, cmd) {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				if c, err := strconv.ParseInt(v, 10, 64); err == nil {
					n += c
				}
			}
		}
	}
	return n
}

// limiterSetting is one setting's runs taken together, as in the JSON summary.
type limiterSetting struct {
	Setting string  `json:"setting"`
	Token   string  `json:"token"`
	Runs    int     `json:"runs"`
	WindowS float64 `json:"window_s"` // the runs' windows added up
	// Accepted counts every 202; AcceptedPerS those answered within their run's window
	// over the windows' sum; RunAcceptedPerS is each run's own rate, in run order.
	Accepted        int64        `json:"accepted"`
	AcceptedPerS    float64      `json:"accepted_per_s"`
	RunAcceptedPerS []float64    `json:"run_accepted_per_s"`
	AcceptLatency   summary      `json:"accept_latency"`
	Unchanged       int64        `json:"unchanged"`
	RateLimited     int64        `json:"rate_limited_429"`
	ErrorsTotal     int64        `json:"errors_total"`
	Errors          []errorCount `json:"errors"`
	// CPU µs per accepted write by process group: CPUSpan "start..drained" when every run
	// drained (the pipeline's work for the writes included), "window" (start until the last
	// answer) otherwise.
	CPUSpan       string             `json:"cpu_span,omitempty"`
	UsPerAccepted map[string]float64 `json:"cpu_us_per_accepted,omitempty"`
	// UsPerAcceptedWindow is the same over the runs' windows only.
	UsPerAcceptedWindow map[string]float64 `json:"cpu_us_per_accepted_window,omitempty"`
	// ScriptCallsPerAccepted is Redis script calls (all clients) per accepted write from the
	// runs' start until drained; the limiter adds one per player write.
	ScriptCallsPerAccepted *float64 `json:"redis_script_calls_per_accepted,omitempty"`
}

// limiterReport is the limiter phase in the JSON summary.
type limiterReport struct {
	Concurrency int            `json:"concurrency"`
	RunS        float64        `json:"run_s"`
	Schedule    []string       `json:"schedule"`
	Off         limiterSetting `json:"off"`
	On          limiterSetting `json:"on"`
	// AcceptedRatio is on / off of accepted_per_s; CostPct = (1 - ratio) * 100, against the
	// target TargetPct. RoundRatios is each round's on / off, to show the noise.
	AcceptedRatio float64   `json:"accepted_per_s_ratio_on_off"`
	CostPct       float64   `json:"accept_throughput_cost_pct"`
	TargetPct     float64   `json:"target_cost_pct"`
	WithinTarget  bool      `json:"within_target"`
	RoundRatios   []float64 `json:"round_ratios_on_off"`
	P50Ratio      float64   `json:"accept_p50_ratio_on_off"`
	P99Ratio      float64   `json:"accept_p99_ratio_on_off"`
	// ServiceCPURatio is on / off of the service's CPU µs per accepted write.
	ServiceCPURatio float64  `json:"service_cpu_per_accepted_ratio_on_off,omitempty"`
	Notes           []string `json:"notes,omitempty"`
}

// limiterRunFigures is what the report takes of one run; pure data, so the arithmetic can
// be tested without a service.
type limiterRunFigures struct {
	setting    string
	round      int
	window     time.Duration
	accepted   int64 // every 202
	inWindow   int64 // 202s answered within the window
	unchanged  int64
	errors     []errorCount
	latencies  []time.Duration
	cpuWindow  map[string]float64 // CPU s by group over the window; nil if not sampled
	cpuDrained map[string]float64 // CPU s by group from start until drained; nil if it did not drain
	scripts    int64
	scriptsOK  bool
}

func (b *bench) limiterFigures(lp *limiterPhase) []limiterRunFigures {
	out := make([]limiterRunFigures, 0, len(lp.runs))
	for _, r := range lp.runs {
		ph := r.ph
		f := limiterRunFigures{
			setting: r.run.setting, round: r.run.round, window: ph.windowEnd.Sub(ph.start),
			accepted: ph.accepted.Load(), inWindow: ph.inWindow.Load(), unchanged: ph.unchanged.Load(),
			errors: ph.errs.rows(), scripts: r.scripts, scriptsOK: r.scriptsOK,
		}
		f.latencies = ph.acceptLatency.all()
		if len(ph.m0.cpu.procs) > 0 {
			f.cpuWindow = cpuBetween(ph.m0.cpu, ph.m1.cpu, b.procs.hz).CPUS
			if len(ph.m2.cpu.procs) > 0 {
				f.cpuDrained = cpuBetween(ph.m0.cpu, ph.m2.cpu, b.procs.hz).CPUS
			}
		}
		out = append(out, f)
	}
	return out
}

func (b *bench) limiterReport(lp *limiterPhase) *limiterReport {
	if lp == nil || len(lp.runs) == 0 {
		return nil
	}
	r := buildLimiterReport(b.limiterFigures(lp), b.cfg.Concurrency, b.procs.servicePID > 0)
	r.RunS = seconds(lp.runs[0].run.d)
	return r
}

// buildLimiterReport adds up each setting's runs and compares them.
func buildLimiterReport(runs []limiterRunFigures, concurrency int, serviceMeasured bool) *limiterReport {
	r := &limiterReport{Concurrency: concurrency, TargetPct: limiterTargetPct}
	r.Off = limiterSettingOf(limiterOff, "server role (skips the limiter)", runs)
	r.On = limiterSettingOf(limiterOn, "player, sub = the user (rate-limited)", runs)
	for _, f := range runs {
		r.Schedule = append(r.Schedule, fmt.Sprintf("%s %d", f.setting, f.round))
	}
	if q, ok := ratio(r.On.AcceptedPerS, r.Off.AcceptedPerS); ok {
		r.AcceptedRatio = round3(q)
		r.CostPct = round2((1 - q) * 100)
		r.WithinTarget = r.CostPct < limiterTargetPct
	}
	for round := 1; ; round++ {
		off, on, ok := roundRates(runs, round)
		if !ok {
			break
		}
		q, _ := ratio(on, off)
		r.RoundRatios = append(r.RoundRatios, round3(q))
	}
	if q, ok := ratio(r.On.AcceptLatency.P50, r.Off.AcceptLatency.P50); ok {
		r.P50Ratio = round3(q)
	}
	if q, ok := ratio(r.On.AcceptLatency.P99, r.Off.AcceptLatency.P99); ok {
		r.P99Ratio = round3(q)
	}
	if serviceMeasured && r.On.CPUSpan == r.Off.CPUSpan {
		if q, ok := ratio(r.On.UsPerAccepted[grpService], r.Off.UsPerAccepted[grpService]); ok {
			r.ServiceCPURatio = round3(q)
		}
	}
	if !serviceMeasured {
		delete(r.On.UsPerAccepted, grpService)
		delete(r.Off.UsPerAccepted, grpService)
		delete(r.On.UsPerAcceptedWindow, grpService)
		delete(r.Off.UsPerAcceptedWindow, grpService)
	}
	r.Notes = limiterNotes(r)
	return r
}

// limiterSettingOf adds up the runs of one setting.
func limiterSettingOf(setting, token string, runs []limiterRunFigures) limiterSetting {
	s := limiterSetting{Setting: setting, Token: token, RunAcceptedPerS: []float64{}}
	var window time.Duration
	var inWindow int64
	var lat []time.Duration
	var errs [][]errorCount
	cpuW, cpuD := map[string]float64{}, map[string]float64{}
	haveW, haveD := true, true
	var scripts int64
	scriptsOK := true
	for _, f := range runs {
		if f.setting != setting {
			continue
		}
		s.Runs++
		window += f.window
		inWindow += f.inWindow
		s.Accepted += f.accepted
		s.Unchanged += f.unchanged
		s.RunAcceptedPerS = append(s.RunAcceptedPerS, perSecond(f.inWindow, f.window))
		lat = append(lat, f.latencies...)
		errs = append(errs, f.errors)
		haveW = haveW && f.cpuWindow != nil
		haveD = haveD && f.cpuDrained != nil
		for g, v := range f.cpuWindow {
			cpuW[g] += v
		}
		for g, v := range f.cpuDrained {
			cpuD[g] += v
		}
		scripts += f.scripts
		scriptsOK = scriptsOK && f.scriptsOK
	}
	if s.Runs == 0 {
		return s
	}
	s.WindowS = seconds(window)
	s.AcceptedPerS = perSecond(inWindow, window)
	s.AcceptLatency = summarize(lat)
	s.Errors = mergeErrors(errs...)
	for _, e := range s.Errors {
		s.ErrorsTotal += e.Count
		if strings.HasPrefix(e.Key, "429 ") {
			s.RateLimited += e.Count
		}
	}
	if haveW {
		s.UsPerAcceptedWindow = cpuUsage{CPUS: cpuW}.perUnit(s.Accepted)
		s.CPUSpan, s.UsPerAccepted = "window", s.UsPerAcceptedWindow
	}
	if haveD {
		s.CPUSpan, s.UsPerAccepted = "start..drained", cpuUsage{CPUS: cpuD}.perUnit(s.Accepted)
	}
	if scriptsOK && s.Accepted > 0 {
		v := round2(float64(scripts) / float64(s.Accepted))
		s.ScriptCallsPerAccepted = &v
	}
	return s
}

// roundRates is the accepted/s of round's off and on runs; false when either is missing.
func roundRates(runs []limiterRunFigures, round int) (off, on float64, ok bool) {
	var haveOff, haveOn bool
	for _, f := range runs {
		if f.round != round {
			continue
		}
		switch f.setting {
		case limiterOff:
			off, haveOff = perSecond(f.inWindow, f.window), true
		case limiterOn:
			on, haveOn = perSecond(f.inWindow, f.window), true
		}
	}
	return off, on, haveOff && haveOn
}

// ratio is a / b, false when b is not positive.
func ratio(a, b float64) (float64, bool) {
	if b <= 0 {
		return 0, false
	}
	return a / b, true
}

// mergeErrors adds up error counts by key, keeping the first sample of each, in the
// order counter.rows gives (most frequent first).
func mergeErrors(lists ...[]errorCount) []errorCount {
	byKey := map[string]*errorCount{}
	for _, list := range lists {
		for _, e := range list {
			if m := byKey[e.Key]; m != nil {
				m.Count += e.Count
				if m.Sample == "" {
					m.Sample = e.Sample
				}
				continue
			}
			c := e
			byKey[e.Key] = &c
		}
	}
	out := make([]errorCount, 0, len(byKey))
	for _, e := range byKey {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b errorCount) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Key, b.Key)) })
	return out
}

// limiterNotes are the warnings the limiter figures call for.
func limiterNotes(r *limiterReport) []string {
	var notes []string
	if r.On.RateLimited > 0 {
		notes = append(notes, fmt.Sprintf("WARNING: %d player writes were refused with 429: the service's LEADERBOARD_RATE_LIMIT is too low for the bench "+
			"(scripts/bench.sh: BENCH_RATE_LIMIT, default 100000/1s), so the on figures do not measure the limiter's whole work", r.On.RateLimited))
	}
	if r.Off.RateLimited > 0 {
		notes = append(notes, fmt.Sprintf("WARNING: %d server-token writes were refused with 429 (LEADERBOARD_SERVER_RATE_LIMIT set?)", r.Off.RateLimited))
	}
	for _, s := range []limiterSetting{r.Off, r.On} {
		if n := s.ErrorsTotal - s.RateLimited; n > 0 {
			notes = append(notes, fmt.Sprintf("WARNING: limiter %s: %d errors other than 429 (see the runs above)", s.Setting, n))
		}
		if s.Unchanged > 0 {
			notes = append(notes, fmt.Sprintf("WARNING: limiter %s: %d answers 'unchanged' to scores that improve", s.Setting, s.Unchanged))
		}
	}
	if on, off := r.On.ScriptCallsPerAccepted, r.Off.ScriptCallsPerAccepted; on != nil && off != nil && r.On.Accepted > 0 && *on-*off < 0.5 {
		notes = append(notes, fmt.Sprintf("WARNING: the on runs made %.2f Redis script calls per accepted write, the off runs %.2f: the limiter "+
			"(one GCRA script call per player write) does not seem to run; is the service's LEADERBOARD_RATE_LIMIT off?", *on, *off))
	}
	if len(r.RoundRatios) > 1 {
		lo, hi := slices.Min(r.RoundRatios), slices.Max(r.RoundRatios)
		if hi-lo > limiterTargetPct/100 {
			notes = append(notes, fmt.Sprintf("the rounds' on/off ratios range from %.3f to %.3f, wider than the %.0f %% to resolve: the machine was too noisy "+
				"for this comparison; a longer -limiter-duration (or a quieter machine) narrows it", lo, hi, limiterTargetPct))
		}
	}
	if r.On.Runs > 0 && r.Off.Runs > 0 && r.AcceptedRatio > 0 && !r.WithinTarget {
		notes = append(notes, fmt.Sprintf("the limiter costs %.1f %% of the accept throughput, over the %.0f %% target", r.CostPct, r.TargetPct))
	}
	return notes
}

// printLimiter prints the limiter phase's comparison.
func (b *bench) printLimiter(lp *limiterPhase) {
	r := b.limiterReport(lp)
	if r == nil {
		return
	}
	fmt.Fprintf(b.out, "limiter: %d closed-loop writers, runs of %.1fs in the order %s\n", r.Concurrency, r.RunS, strings.Join(r.Schedule, ", "))
	for _, s := range []limiterSetting{r.Off, r.On} {
		fmt.Fprintf(b.out, "  %-3s (%s): accepted %d, %.1f/s over %.1fs (runs %s), 429s %d, errors %d, accept %s\n",
			s.Setting, s.Token, s.Accepted, s.AcceptedPerS, s.WindowS, fmtFloats(s.RunAcceptedPerS, "%.1f"), s.RateLimited, s.ErrorsTotal, fmtSummary(s.AcceptLatency))
		if s.UsPerAccepted != nil {
			fmt.Fprintf(b.out, "      CPU µs per accepted write (%s): %s", s.CPUSpan, fmtGroups(s.UsPerAccepted, "%.0f"))
			if s.ScriptCallsPerAccepted != nil {
				fmt.Fprintf(b.out, "; Redis script calls per accepted write %.2f", *s.ScriptCallsPerAccepted)
			}
			fmt.Fprintln(b.out)
		}
	}
	fmt.Fprintf(b.out, "  %s\n", limiterVerdict(r))
	for _, n := range r.Notes {
		fmt.Fprintf(b.out, "  %s\n", n)
	}
}

// limiterVerdict is the one-line comparison of on and off.
func limiterVerdict(r *limiterReport) string {
	if r.AcceptedRatio <= 0 {
		return "on/off: no accepted writes with the limiter off; no ratio"
	}
	cost := fmt.Sprintf("the limiter costs %.1f %% of accept throughput", r.CostPct)
	if r.CostPct < 0 {
		cost = fmt.Sprintf("on was %.1f %% faster than off (noise: no cost measurable)", -r.CostPct)
	}
	s := fmt.Sprintf("on/off: accepted/s ratio %.3f (per round %s): %s (target < %.0f %%: %s); accept p50 ratio %.2f, p99 ratio %.2f",
		r.AcceptedRatio, fmtFloats(r.RoundRatios, "%.3f"), cost, r.TargetPct, map[bool]string{true: "met", false: "NOT met"}[r.WithinTarget], r.P50Ratio, r.P99Ratio)
	if r.ServiceCPURatio > 0 {
		s += fmt.Sprintf("; service CPU per accepted write ratio %.2f", r.ServiceCPURatio)
	}
	return s
}

func fmtFloats(v []float64, format string) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, ", ")
}
