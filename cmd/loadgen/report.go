package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// writeReport is a write phase as it appears in the JSON summary.
type writeReport struct {
	Name          string       `json:"name"`
	Mode          string       `json:"mode"`
	OfferedRate   float64      `json:"offered_per_s,omitempty"`
	Concurrency   int          `json:"concurrency,omitempty"`
	DurationS     float64      `json:"duration_s"`
	ElapsedS      float64      `json:"elapsed_s"` // until the last answer
	Issued        int64        `json:"issued"`
	IssuedPerS    float64      `json:"issued_per_s"`
	Dropped       int64        `json:"dropped_inflight_bound"`
	Accepted      int64        `json:"accepted"`
	AcceptedPerS  float64      `json:"accepted_per_s"` // 202s answered within the phase window / window
	Unchanged     int64        `json:"unchanged"`
	ErrorsTotal   int64        `json:"errors_total"`
	Errors        []errorCount `json:"errors"`
	AcceptLatency summary      `json:"accept_latency"`
	Visibility    summary      `json:"visibility_latency"`
	NotVisible    int64        `json:"not_visible_within_timeout"`
	AppliedPerS   float64      `json:"pipeline_applied_per_s,omitempty"` // accepted / (phase start until score_history held them all)
	LoadgenCores  float64      `json:"loadgen_cpu_cores"`                // loadgen's CPU time / phase elapsed
	DrainedAfterS float64      `json:"pipeline_drained_after_s,omitempty"`
}

func (b *bench) writeReport(ph *writePhase) writeReport {
	window := ph.windowEnd.Sub(ph.start)
	r := writeReport{
		Name: ph.name, Mode: ph.mode, OfferedRate: ph.offered,
		DurationS: seconds(window), ElapsedS: seconds(ph.end.Sub(ph.start)),
		Issued: ph.issued.Load(), Dropped: ph.dropped.Load(), Accepted: ph.accepted.Load(),
		Unchanged: ph.unchanged.Load(), ErrorsTotal: ph.errs.total(), Errors: ph.errs.rows(),
		AcceptLatency: ph.acceptLatency.summary(), Visibility: ph.visLatency.summary(), NotVisible: ph.notVisible,
	}
	if ph.offered == 0 {
		r.Concurrency = b.cfg.Concurrency
	}
	r.IssuedPerS = perSecond(r.Issued, window)
	r.DrainedAfterS = seconds(ph.drainedAfter)
	if ph.drainedAfter > 0 {
		r.AppliedPerS = perSecond(r.Accepted, ph.end.Sub(ph.start)+ph.drainedAfter)
	}
	if el := ph.end.Sub(ph.start); el > 0 {
		r.LoadgenCores = float64(int64(ph.cpu.Seconds()/el.Seconds()*100)) / 100
	}
	r.AcceptedPerS = perSecond(ph.inWindow.Load(), window)
	return r
}

// readReport is a read sub-phase as it appears in the JSON summary.
type readReport struct {
	Name        string       `json:"name"`
	Concurrency int          `json:"concurrency"`
	DurationS   float64      `json:"duration_s"`
	OK          int64        `json:"ok"`
	PerS        float64      `json:"ok_per_s"`
	ErrorsTotal int64        `json:"errors_total"`
	Errors      []errorCount `json:"errors"`
	Latency     summary      `json:"latency"`
}

func (b *bench) readReport(ph *readPhase) readReport {
	d := ph.end.Sub(ph.start)
	return readReport{
		Name: ph.name, Concurrency: b.cfg.Concurrency, DurationS: seconds(d), OK: ph.ok.Load(),
		PerS: perSecond(ph.ok.Load(), d), ErrorsTotal: ph.errs.total(), Errors: ph.errs.rows(), Latency: ph.latency.summary(),
	}
}

func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(int64(float64(n)/d.Seconds()*10)) / 10
}

func (b *bench) printWrite(ph *writePhase) {
	r := b.writeReport(ph)
	if r.OfferedRate > 0 {
		fmt.Fprintf(b.out, "  offered %.0f/s, issued %d (%.1f/s), dropped at the in-flight bound %d\n", r.OfferedRate, r.Issued, r.IssuedPerS, r.Dropped)
	} else {
		fmt.Fprintf(b.out, "  %d writers issued %d (%.1f/s)\n", r.Concurrency, r.Issued, r.IssuedPerS)
	}
	fmt.Fprintf(b.out, "  accepted %d (%.1f writes/s), unchanged %d, errors %d\n", r.Accepted, r.AcceptedPerS, r.Unchanged, r.ErrorsTotal)
	fmt.Fprintf(b.out, "  accept latency: %s\n", fmtSummary(r.AcceptLatency))
	printErrors(b, r.Errors)
}

func (b *bench) printVisibility(ph *writePhase) {
	r := b.writeReport(ph)
	fmt.Fprintf(b.out, "  accept -> visible in Redis: %s; not visible within %s: %d\n", fmtSummary(r.Visibility), b.cfg.VisTimeout, r.NotVisible)
	fmt.Fprintf(b.out, "  loadgen used %.2f CPU cores during the phase\n", r.LoadgenCores)
	if n := b.vis.pollErrs.Load(); n > 0 {
		fmt.Fprintf(b.out, "  visibility poller: %d failed polls, last: %v\n", n, b.vis.lastError.Load())
	}
}

func (b *bench) printRead(ph *readPhase) {
	r := b.readReport(ph)
	fmt.Fprintf(b.out, "  %-9s %d ok (%.1f req/s), errors %d, latency %s\n", r.Name, r.OK, r.PerS, r.ErrorsTotal, fmtSummary(r.Latency))
	printErrors(b, r.Errors)
}

func printErrors(b *bench, rows []errorCount) {
	for _, e := range rows {
		fmt.Fprintf(b.out, "    error %-34s %8d  e.g. %s\n", e.Key, e.Count, truncate(e.Sample, 140))
	}
}

func fmtSummary(s summary) string {
	if s.Count == 0 {
		return "no samples"
	}
	return fmt.Sprintf("p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms (n=%d)", s.P50, s.P95, s.P99, s.Max, s.Count)
}

func truncate(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// printTable prints the final summary.
func (b *bench) printTable() {
	fmt.Fprintln(b.out, "\n==================== leaderboard bench ====================")
	tw := tabwriter.NewWriter(b.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(b.writes) > 0 {
		fmt.Fprintln(tw, "writes\toffered/s\taccepted/s\taccept p50 ms\tp95 ms\tp99 ms\tmax ms\terrors\tdropped\tunchanged\t")
		for _, ph := range b.writes {
			r := b.writeReport(ph)
			offered := fmt.Sprintf("%.0f", r.OfferedRate)
			if r.OfferedRate == 0 {
				offered = fmt.Sprintf("closed, %d", r.Concurrency)
			}
			a := r.AcceptLatency
			fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t\n",
				r.Name, offered, r.AcceptedPerS, a.P50, a.P95, a.P99, a.Max, r.ErrorsTotal, r.Dropped, r.Unchanged)
		}
		fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t\t\t")
		fmt.Fprintln(tw, "accept -> Redis\tvisible\tnot visible\tp50 ms\tp95 ms\tp99 ms\tmax ms\tdrained after\tapplied/s\tloadgen CPU\t")
		for _, ph := range b.writes {
			r := b.writeReport(ph)
			v := r.Visibility
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f s\t%.1f\t%.2f cores\t\n", r.Name, v.Count, r.NotVisible, v.P50, v.P95, v.P99, v.Max, r.DrainedAfterS, r.AppliedPerS, r.LoadgenCores)
		}
	}
	if len(b.reads) > 0 {
		fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t\t\t")
		fmt.Fprintln(tw, "reads\tconcurrency\treq/s\tp50 ms\tp95 ms\tp99 ms\tmax ms\terrors\t\t\t")
		for _, ph := range b.reads {
			r := b.readReport(ph)
			l := r.Latency
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t\t\t\n", r.Name, r.Concurrency, r.PerS, l.P50, l.P95, l.P99, l.Max, r.ErrorsTotal)
		}
	}
	tw.Flush()
	fmt.Fprintln(b.out, "latencies: accept = until the 202, from the scheduled send time (phase A) or the send (phase B);")
	ps := b.vis.stats()
	fmt.Fprintf(b.out, "           visible = from the 202 until a poll of the Redis hash shows the score (poll every %s;\n", b.cfg.PollInterval)
	fmt.Fprintf(b.out, "           %d poll cycles, mean %.1f ms, max %.1f ms, %d failed); its percentiles cover only the\n", ps.Cycles, ps.MeanCycleMs, ps.MaxCycleMs, ps.Errors)
	fmt.Fprintf(b.out, "           scores seen within %s of the phase's end, the rest are counted as not visible;\n", b.cfg.VisTimeout)
	fmt.Fprintln(b.out, "           drained after = from the phase's last answer until score_history held every 202;")
	fmt.Fprintln(b.out, "           applied/s = the phase's 202s / (phase + drained after): what the pipeline sustained")
	if c := b.check; c != nil {
		verdict := "PASS"
		if !c.Pass {
			verdict = "FAIL"
		}
		fmt.Fprintf(b.out, "\nexactly-once: %s  (202s %d, score_history rows %d, drained %v after %.1fs)\n", verdict, c.Accepted, c.HistoryRows, c.Drained, c.DrainWaitS)
		fmt.Fprintf(b.out, "  score_history: missing %d, extra %d, duplicated %d, wrong rows %d; score_requests missing %d\n", c.Missing, c.Extra, c.Duplicated, c.WrongRows, c.RequestsMissing)
		fmt.Fprintf(b.out, "  board_entries (%d users): wrong %d, missing %d, extra %d\n", c.Users, c.PGWrong, c.PGMissing, c.PGExtra)
		fmt.Fprintf(b.out, "  redis hash: wrong %d, missing %d, extra %d; sorted set mismatches %d (zcard %d)\n", c.RedisWrong, c.RedisMissing, c.RedisExtra, c.RedisZSetWrong, c.RedisZCard)
		fmt.Fprintf(b.out, "  ambiguous sends (5xx or no answer) %d, of which applied once %d; dead letters %d\n", c.Ambiguous, c.AmbiguousApplied, c.DeadLetters)
		if c.Error != "" {
			fmt.Fprintf(b.out, "  check error: %s\n", c.Error)
		}
		for _, e := range c.Examples {
			fmt.Fprintf(b.out, "  - %s\n", e)
		}
	}
	fmt.Fprintf(b.out, "\nmachine: %s\n", machineCaveat)
}

// writeJSON writes the summary file.
func (b *bench) writeJSON(path string) error {
	out := struct {
		Machine    string        `json:"machine"`
		FinishedAt time.Time     `json:"finished_at"`
		Config     config        `json:"config"`
		Writes     []writeReport `json:"writes"`
		Reads      []readReport  `json:"reads"`
		Poller     pollerStats   `json:"visibility_poller"`
		Check      *checkReport  `json:"exactly_once,omitempty"`
		Verdict    string        `json:"verdict"`
	}{Machine: machineCaveat, FinishedAt: time.Now().UTC(), Poller: b.vis.stats(), Config: b.cfg, Check: b.check, Verdict: "not checked"}
	for _, ph := range b.writes {
		out.Writes = append(out.Writes, b.writeReport(ph))
	}
	for _, ph := range b.reads {
		out.Reads = append(out.Reads, b.readReport(ph))
	}
	if b.check != nil {
		out.Verdict = map[bool]string{true: "PASS", false: "FAIL"}[b.check.Pass]
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}
