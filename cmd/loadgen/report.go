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
	AnswerLatency summary      `json:"answer_latency"` // every answered send, failures too
	Visibility    summary      `json:"visibility_latency"`
	NotVisible    int64        `json:"not_visible_within_timeout"`
	AppliedPerS   float64      `json:"pipeline_applied_per_s,omitempty"` // accepted / (phase start until score_history held them all)
	LoadgenCores  float64      `json:"loadgen_cpu_cores"`                // loadgen's CPU time / phase elapsed
	DrainedAfterS float64      `json:"pipeline_drained_after_s,omitempty"`

	// Windows is the phase window by window (-window): accepted and applied commands.
	Windows *windowsReport `json:"windows,omitempty"`
	// Holds says whether an open-loop phase's rate holds (see judge).
	Holds *holdsReport `json:"holds,omitempty"`

	// Kinds breaks the mixed phase down by kind of command.
	Kinds []kindReport `json:"kinds,omitempty"`
	// Pipeline is what the pipeline applied (score_history rows), from PostgreSQL.
	Pipeline *pipelineReport `json:"pipeline,omitempty"`
	// CPU is the CPU time by process group.
	CPU *phaseCPU `json:"cpu,omitempty"`
	// WAL is the PostgreSQL WAL the phase made until drained.
	WAL *phaseWAL `json:"wal,omitempty"`
}

// kindReport is one kind of command of the mixed phase.
type kindReport struct {
	Kind          string       `json:"kind"`
	OfferedRate   float64      `json:"offered_per_s"`
	Issued        int64        `json:"issued"`
	Dropped       int64        `json:"dropped"`
	Accepted      int64        `json:"accepted"`
	AcceptedPerS  float64      `json:"accepted_per_s"`
	ErrorsTotal   int64        `json:"errors_total"`
	Errors        []errorCount `json:"errors"`
	AcceptLatency summary      `json:"accept_latency"`
	Visibility    summary      `json:"visibility_latency"`
	VisibleWhen   string       `json:"visible_when"`
	NotVisible    int64        `json:"not_visible_within_timeout"`
}

// visibleWhen says what "visible in Redis" means for each kind.
var visibleWhen = [numKinds]string{
	"global hash value >= the score sent",
	"points hash value >= the user's running sum of accepted deltas",
	"match:{id} hash value >= the user's running sum of accepted points in the match",
}

// pipelineReport is how fast the pipeline applied a phase's commands: score_history rows
// (one per board a command touched) and commands (rows less the daily and season rows of
// match points).
type pipelineReport struct {
	// From the phase's start until the pipeline drained.
	Rows         int64   `json:"rows"`
	Commands     int64   `json:"commands"`
	ToDrainedS   float64 `json:"to_drained_s"`
	RowsPerS     float64 `json:"rows_per_s"`
	CommandsPerS float64 `json:"commands_per_s"`
	// During the phase window (its start until its last answer).
	WindowRows         int64   `json:"window_rows"`
	WindowCommands     int64   `json:"window_commands"`
	WindowS            float64 `json:"window_s"`
	WindowRowsPerS     float64 `json:"window_rows_per_s"`
	WindowCommandsPerS float64 `json:"window_commands_per_s"`
}

// phaseCPU is a write phase's CPU by process group.
type phaseCPU struct {
	// ToDrained is from the phase's start until the pipeline drained (what the per-row
	// figures divide), Window from its start until its last answer.
	ToDrained *cpuUsage `json:"to_drained,omitempty"`
	Window    cpuUsage  `json:"window"`
	// µs of CPU per applied score_history row and per applied command, by group.
	UsPerRow     map[string]float64 `json:"us_per_applied_row,omitempty"`
	UsPerCommand map[string]float64 `json:"us_per_applied_command,omitempty"`
	// Thousands of the machine's instructions (every process, the load generator
	// included) per applied row and command: steadier across a shared machine's slow and
	// fast hours than CPU time. 0 when not counted.
	KInstrPerRow     float64 `json:"machine_kinstructions_per_applied_row,omitempty"`
	KInstrPerCommand float64 `json:"machine_kinstructions_per_applied_command,omitempty"`
}

func (b *bench) writeReport(ph *writePhase) writeReport {
	window := ph.windowEnd.Sub(ph.start)
	r := writeReport{
		Name: ph.name, Mode: ph.mode, OfferedRate: ph.offered,
		DurationS: seconds(window), ElapsedS: seconds(ph.end.Sub(ph.start)),
		Issued: ph.issued.Load(), Dropped: ph.dropped.Load(), Accepted: ph.accepted.Load(),
		Unchanged: ph.unchanged.Load(), ErrorsTotal: ph.errs.total(), Errors: ph.errs.rows(),
		AcceptLatency: ph.acceptLatency.summary(), AnswerLatency: ph.answerLatency.summary(), Visibility: ph.visLatency.summary(), NotVisible: ph.notVisible,
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
	r.Windows = ph.win.report()
	if ph.offered > 0 && r.Windows != nil {
		r.Holds = judge(r)
	}
	if ph.mixed {
		for k := range numKinds {
			ks := &ph.kinds[k]
			r.Kinds = append(r.Kinds, kindReport{
				Kind: kind(k).String(), OfferedRate: round2(ks.offered), Issued: ks.issued.Load(), Dropped: ks.dropped.Load(),
				Accepted: ks.accepted.Load(), AcceptedPerS: perSecond(ks.inWindow.Load(), window),
				ErrorsTotal: ks.errs.total(), Errors: ks.errs.rows(), AcceptLatency: ks.acceptLatency.summary(),
				Visibility: ks.visLatency.summary(), VisibleWhen: visibleWhen[k], NotVisible: ks.notVisible,
			})
		}
	}
	if ph.m0.rowsOK && ph.m1.rowsOK {
		p := &pipelineReport{
			WindowRows: ph.m1.rows - ph.m0.rows, WindowCommands: (ph.m1.rows - ph.m1.extraRows) - (ph.m0.rows - ph.m0.extraRows),
		}
		w := ph.m1.at.Sub(ph.m0.at)
		p.WindowS, p.WindowRowsPerS, p.WindowCommandsPerS = seconds(w), perSecond(p.WindowRows, w), perSecond(p.WindowCommands, w)
		if ph.m2.rowsOK {
			d := ph.m2.at.Sub(ph.m0.at)
			p.Rows, p.Commands = ph.m2.rows-ph.m0.rows, (ph.m2.rows-ph.m2.extraRows)-(ph.m0.rows-ph.m0.extraRows)
			p.ToDrainedS, p.RowsPerS, p.CommandsPerS = seconds(d), perSecond(p.Rows, d), perSecond(p.Commands, d)
			r.WAL = walBetween(ph.m0.wal, ph.m2.wal, p.Rows, p.Commands)
		}
		r.Pipeline = p
	}
	if len(ph.m0.cpu.procs) > 0 {
		c := &phaseCPU{Window: cpuBetween(ph.m0.cpu, ph.m1.cpu, b.procs.hz)}
		if len(ph.m2.cpu.procs) > 0 {
			u := cpuBetween(ph.m0.cpu, ph.m2.cpu, b.procs.hz)
			c.ToDrained = &u
			if r.Pipeline != nil {
				c.UsPerRow = u.perUnit(r.Pipeline.Rows)
				c.UsPerCommand = u.perUnit(r.Pipeline.Commands)
				c.KInstrPerRow = u.kInstrPerUnit(r.Pipeline.Rows)
				c.KInstrPerCommand = u.kInstrPerUnit(r.Pipeline.Commands)
			}
		}
		r.CPU = c
	}
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
	// VsCeiling is PerS / the GET /healthz rate of the same run (the bare HTTP ceiling).
	VsCeiling float64  `json:"vs_healthz_ceiling,omitempty"`
	CPU       cpuUsage `json:"cpu"`
	// UsPerRequest is µs of CPU per successful read, by process group.
	UsPerRequest map[string]float64 `json:"us_per_request,omitempty"`
	// KInstrPerRequest is thousands of the machine's instructions per successful read
	// (phaseCPU's); 0 when not counted.
	KInstrPerRequest float64 `json:"machine_kinstructions_per_request,omitempty"`
	// Page walks: pages read past the first, the deepest page reached (0 = the first),
	// and walks that reached the end and started over.
	PagesDeep int64 `json:"pages_past_first,omitempty"`
	MaxDepth  int64 `json:"max_page_depth,omitempty"`
	Restarts  int64 `json:"walks_restarted,omitempty"`
}

func (b *bench) readReport(ph *readPhase) readReport {
	d := ph.end.Sub(ph.start)
	r := readReport{
		Name: ph.name, Concurrency: b.cfg.Concurrency, DurationS: seconds(d), OK: ph.ok.Load(),
		PerS: perSecond(ph.ok.Load(), d), ErrorsTotal: ph.errs.total(), Errors: ph.errs.rows(), Latency: ph.latency.summary(),
		CPU: ph.cpu, UsPerRequest: ph.cpu.perUnit(ph.ok.Load()), KInstrPerRequest: ph.cpu.kInstrPerUnit(ph.ok.Load()),
		PagesDeep: ph.pagesDeep.Load(), MaxDepth: ph.maxDepth.Load(), Restarts: ph.restarts.Load(),
	}
	if b.ceiling != nil && ph != b.ceiling {
		if c := b.readReport(b.ceiling); c.PerS > 0 {
			r.VsCeiling = round2(r.PerS / c.PerS)
		}
	}
	return r
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
	if r.AnswerLatency.Count != r.AcceptLatency.Count {
		fmt.Fprintf(b.out, "  every answer:   %s\n", fmtSummary(r.AnswerLatency))
	}
	printErrors(b, r.Errors)
	for _, k := range r.Kinds {
		fmt.Fprintf(b.out, "    %-5s offered %.0f/s, issued %d, dropped %d, accepted %d (%.1f/s), errors %d, accept %s\n",
			k.Kind, k.OfferedRate, k.Issued, k.Dropped, k.Accepted, k.AcceptedPerS, k.ErrorsTotal, fmtSummary(k.AcceptLatency))
	}
}

func (b *bench) printVisibility(ph *writePhase) {
	r := b.writeReport(ph)
	fmt.Fprintf(b.out, "  accept -> visible in Redis: %s; not visible within %s: %d\n", fmtSummary(r.Visibility), b.cfg.VisTimeout, r.NotVisible)
	for _, k := range r.Kinds {
		fmt.Fprintf(b.out, "    %-5s %s; not visible %d\n", k.Kind, fmtSummary(k.Visibility), k.NotVisible)
	}
	fmt.Fprintf(b.out, "  loadgen used %.2f CPU cores during the phase\n", r.LoadgenCores)
	if n := b.vis.pollErrs.Load(); n > 0 {
		fmt.Fprintf(b.out, "  visibility poller: %d failed polls, last: %v\n", n, b.vis.lastError.Load())
	}
}

// printPipeline prints what the pipeline applied and the CPU it took, once drained.
func (b *bench) printPipeline(ph *writePhase) {
	r := b.writeReport(ph)
	if p := r.Pipeline; p != nil {
		fmt.Fprintf(b.out, "  applied: window %.1f rows/s, %.1f commands/s (%d rows in %.1fs)", p.WindowRowsPerS, p.WindowCommandsPerS, p.WindowRows, p.WindowS)
		if p.ToDrainedS > 0 {
			fmt.Fprintf(b.out, "; start to drained %.1f rows/s, %.1f commands/s (%d rows in %.1fs)", p.RowsPerS, p.CommandsPerS, p.Rows, p.ToDrainedS)
		}
		fmt.Fprintln(b.out)
	}
	if c := r.CPU; c != nil {
		u := c.Window
		if c.ToDrained != nil {
			u = *c.ToDrained
		}
		fmt.Fprintf(b.out, "  cores used: %s\n", fmtCores(u))
		if c.UsPerRow != nil {
			fmt.Fprintf(b.out, "  CPU µs per applied row: %s\n", fmtGroups(c.UsPerRow, "%.0f"))
		}
		if c.KInstrPerRow > 0 {
			fmt.Fprintf(b.out, "  machine instructions per applied row: %.0fk\n", c.KInstrPerRow)
		}
	}
	if r.WAL != nil {
		fmt.Fprintf(b.out, "  PostgreSQL WAL: %s\n", fmtWAL(r.WAL))
	}
}

func (b *bench) printRead(ph *readPhase) {
	r := b.readReport(ph)
	fmt.Fprintf(b.out, "  %-14s %d ok (%.1f req/s), errors %d, latency %s", r.Name, r.OK, r.PerS, r.ErrorsTotal, fmtSummary(r.Latency))
	if us, ok := r.UsPerRequest[grpService]; ok && b.procs.servicePID > 0 {
		fmt.Fprintf(b.out, ", service %.0f µs CPU/req", us)
	}
	if r.KInstrPerRequest > 0 {
		fmt.Fprintf(b.out, ", machine %.0fk instructions/req", r.KInstrPerRequest)
	}
	if r.MaxDepth > 0 {
		fmt.Fprintf(b.out, ", deepest page %d", r.MaxDepth)
	}
	fmt.Fprintln(b.out)
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

// fmtCores prints cores used by group.
func fmtCores(u cpuUsage) string { return fmtGroups(u.Cores, "%.2f") }

// fmtGroups prints per-group figures in report order, total last.
func fmtGroups(m map[string]float64, format string) string {
	var parts []string
	for _, g := range append(append([]string{}, cpuGroups...), grpTotal) {
		if v, ok := m[g]; ok {
			parts = append(parts, g+" "+fmt.Sprintf(format, v))
		}
	}
	return strings.Join(parts, ", ")
}

func truncate(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// dash prints a figure, or "-" when it is not known.
func dash(v float64, ok bool, format string) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// printTable prints the final summary.
func (b *bench) printTable() {
	fmt.Fprintln(b.out, "\n==================== leaderboard bench ====================")
	tw := tabwriter.NewWriter(b.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	blank := func() { fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t\t\t") }
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
			for _, k := range r.Kinds {
				a := k.AcceptLatency
				fmt.Fprintf(tw, "  %s: %s\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t\t\n",
					r.Name, k.Kind, k.OfferedRate, k.AcceptedPerS, a.P50, a.P95, a.P99, a.Max, k.ErrorsTotal, k.Dropped)
			}
		}
		blank()
		fmt.Fprintln(tw, "accept -> Redis\tvisible\tnot visible\tp50 ms\tp95 ms\tp99 ms\tmax ms\tdrained after\tapplied/s\tloadgen CPU\t")
		for _, ph := range b.writes {
			r := b.writeReport(ph)
			v := r.Visibility
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f s\t%.1f\t%.2f cores\t\n", r.Name, v.Count, r.NotVisible, v.P50, v.P95, v.P99, v.Max, r.DrainedAfterS, r.AppliedPerS, r.LoadgenCores)
			for _, k := range r.Kinds {
				v := k.Visibility
				fmt.Fprintf(tw, "  %s: %s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t\t\t\t\n", r.Name, k.Kind, v.Count, k.NotVisible, v.P50, v.P95, v.P99, v.Max)
			}
		}
		blank()
		fmt.Fprintln(tw, "pipeline (score_history)\trows/s\tcommands/s\trows/s window\tcmds/s window\trows\tcommands\tstart..drained s\t\t\t")
		for _, ph := range b.writes {
			r := b.writeReport(ph)
			if p := r.Pipeline; p != nil {
				drained := p.ToDrainedS > 0
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.1f\t%d\t%d\t%s\t\t\t\n", r.Name,
					dash(p.RowsPerS, drained, "%.1f"), dash(p.CommandsPerS, drained, "%.1f"), p.WindowRowsPerS, p.WindowCommandsPerS,
					p.Rows, p.Commands, dash(p.ToDrainedS, drained, "%.1f"))
			}
		}
	}
	b.printLimiterTable(tw, blank)
	b.printCPUTable(tw, blank)
	b.printWALTable(tw, blank)
	if len(b.reads) > 0 || b.ceiling != nil {
		blank()
		fmt.Fprintln(tw, "reads\tconcurrency\treq/s\tvs /healthz\tp50 ms\tp95 ms\tp99 ms\tmax ms\terrors\tservice µs/req\tmachine kinstr/req\t")
		phases := b.reads
		if b.ceiling != nil {
			phases = append([]*readPhase{b.ceiling}, phases...)
		}
		for _, ph := range phases {
			r := b.readReport(ph)
			l := r.Latency
			us, ok := r.UsPerRequest[grpService]
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%s\t%s\t\n", r.Name, r.Concurrency, r.PerS,
				dash(r.VsCeiling, r.VsCeiling > 0, "%.2f"), l.P50, l.P95, l.P99, l.Max, r.ErrorsTotal, dash(us, ok && b.procs.servicePID > 0, "%.0f"),
				dash(r.KInstrPerRequest, r.KInstrPerRequest > 0, "%.0f"))
		}
	}
	tw.Flush()
	if r := b.limiterReport(b.limiter); r != nil {
		fmt.Fprintf(b.out, "limiter %s\n", limiterVerdict(r))
		for _, n := range r.Notes {
			fmt.Fprintf(b.out, "limiter: %s\n", n)
		}
	}
	b.printNotes()
	b.printMemory()
	b.printCheck()
	fmt.Fprintf(b.out, "\nmachine: %s\n", machine())
}

// printLimiterTable prints the limiter phase's settings side by side: each one's runs
// taken together.
func (b *bench) printLimiterTable(tw *tabwriter.Writer, blank func()) {
	r := b.limiterReport(b.limiter)
	if r == nil {
		return
	}
	blank()
	fmt.Fprintf(tw, "limiter (closed, %d; %s)\taccepted/s\tvs off\taccept p50 ms\tp99 ms\t429s\terrors\tservice µs/acc\tredis µs/acc\ttotal µs/acc\tscripts/acc\t\n",
		r.Concurrency, strings.Join(r.Schedule, ","))
	for _, s := range []limiterSetting{r.Off, r.On} {
		if s.Runs == 0 {
			continue
		}
		vs := "1.000"
		if s.Setting == limiterOn {
			vs = dash(r.AcceptedRatio, r.AcceptedRatio > 0, "%.3f")
		}
		us := func(g string) string {
			v, ok := s.UsPerAccepted[g]
			return dash(v, ok, "%.0f")
		}
		scripts := "-"
		if s.ScriptCallsPerAccepted != nil {
			scripts = fmt.Sprintf("%.2f", *s.ScriptCallsPerAccepted)
		}
		fmt.Fprintf(tw, "limiter %s (%d x %.1fs)\t%.1f\t%s\t%.1f\t%.1f\t%d\t%d\t%s\t%s\t%s\t%s\t\n", s.Setting, s.Runs, r.RunS,
			s.AcceptedPerS, vs, s.AcceptLatency.P50, s.AcceptLatency.P99, s.RateLimited, s.ErrorsTotal, us(grpService), us(grpRedis), us(grpTotal), scripts)
	}
}

// printCPUTable prints cores used by process group for every phase, and the CPU per
// applied row of the write phases.
func (b *bench) printCPUTable(tw *tabwriter.Writer, blank func()) {
	type row struct {
		name string
		u    cpuUsage
	}
	var rows []row
	if b.idle != nil {
		rows = append(rows, row{"idle", *b.idle})
	}
	for _, ph := range b.writes {
		if c := b.writeReport(ph).CPU; c != nil {
			u := c.Window
			if c.ToDrained != nil {
				u = *c.ToDrained
			}
			rows = append(rows, row{ph.name, u})
		}
	}
	if b.ceiling != nil {
		rows = append(rows, row{b.ceiling.name, b.ceiling.cpu})
	}
	for _, ph := range b.reads {
		rows = append(rows, row{ph.name, ph.cpu})
	}
	if len(rows) == 0 {
		return
	}
	blank()
	fmt.Fprintln(tw, "CPU s (cores)\twall s\tservice\tpostgres\tredis\ttotal\tloadgen\tpg other dbs\t\t\t")
	cell := func(u cpuUsage, g string) string {
		if g == grpService && b.procs.servicePID == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f (%.2f)", u.CPUS[g], u.Cores[g])
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t\t\t\n", r.name, r.u.Wall.Seconds(),
			cell(r.u, grpService), cell(r.u, grpPostgres), cell(r.u, grpRedis), cell(r.u, grpTotal), cell(r.u, grpLoadgen), cell(r.u, grpPostgresOther))
	}
	var any bool
	for _, ph := range b.writes {
		if c := b.writeReport(ph).CPU; c != nil && c.UsPerRow != nil {
			any = true
		}
	}
	if !any {
		return
	}
	blank()
	fmt.Fprintln(tw, "CPU µs per applied\tservice/row\tpostgres/row\tredis/row\ttotal/row\ttotal/command\tloadgen/row\tmachine kinstr/row\t\t\t")
	for _, ph := range b.writes {
		c := b.writeReport(ph).CPU
		if c == nil || c.UsPerRow == nil {
			continue
		}
		u := c.UsPerRow
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t\t\t\n", ph.name, dash(u[grpService], b.procs.servicePID > 0, "%.0f"),
			u[grpPostgres], u[grpRedis], u[grpTotal], c.UsPerCommand[grpTotal], u[grpLoadgen], dash(c.KInstrPerRow, c.KInstrPerRow > 0, "%.0f"))
	}
}

func (b *bench) printNotes() {
	fmt.Fprintln(b.out, "latencies: accept = until the 202, from the scheduled send time (open loop) or the send (closed loop);")
	ps := b.vis.stats()
	fmt.Fprintf(b.out, "           visible = from the 202 until a poll of the Redis hash shows the value, for a random %.0f %% of the\n", b.cfg.VisSample*100)
	fmt.Fprintf(b.out, "           accepted commands (-visibility-sample; n counts them; poll every %s, slower when that would read\n", b.cfg.PollInterval)
	fmt.Fprintf(b.out, "           more than %d users a second (-poll-max-reads);\n", b.cfg.PollMaxReads)
	fmt.Fprintf(b.out, "           %d poll cycles, mean %.1f ms, max %.1f ms, %d failed); its percentiles cover only the\n", ps.Cycles, ps.MeanCycleMs, ps.MaxCycleMs, ps.Errors)
	fmt.Fprintf(b.out, "           values seen within %s of the phase's end, the rest are counted as not visible;\n", b.cfg.VisTimeout)
	fmt.Fprintln(b.out, "           best: the global hash value >= the score; incr: the points hash value >= the user's running sum;")
	fmt.Fprintln(b.out, "           match: the match:{id} hash value >= the user's running sum of points in the match;")
	fmt.Fprintln(b.out, "           drained after = from the phase's last answer until score_history held every 202;")
	fmt.Fprintln(b.out, "           applied/s = the phase's 202s / (phase + drained after): what the pipeline sustained")
	fmt.Fprintln(b.out, "pipeline:  rows = score_history rows (one per board a command touched: 3 per match point), commands = rows")
	fmt.Fprintln(b.out, "           less the daily and season rows; rows/s and commands/s from the phase's start until drained,")
	fmt.Fprintln(b.out, "           'window' from its start until its last answer")
	fmt.Fprintf(b.out, "CPU:       seconds of utime+stime from /proc/<pid>/stat (%.0f ticks/s), cores = CPU s / wall s; write phases\n", b.procs.hz)
	fmt.Fprintln(b.out, "           from their start until drained (the visibility poller's reads of Redis included), reads over")
	fmt.Fprintln(b.out, "           the sub-phase; µs per applied row = CPU s / score_history rows added in that window; total =")
	fmt.Fprintln(b.out, "           service (embedded broker included) + postgres (postmaster, background processes, the bench")
	fmt.Fprintln(b.out, "           database's backends) + redis; 'pg other dbs' = backends of other databases (other users' tests),")
	fmt.Fprintln(b.out, "           left out of the total; processes started meanwhile count from zero, ended ones through their")
	fmt.Fprintln(b.out, "           parent's cutime+cstime (an ended backend of another database then counts as postgres)")
	if b.procs.instr != nil {
		fmt.Fprintln(b.out, "           machine kinstr = thousands of instructions every CPU retired (user and kernel, every process:")
		fmt.Fprintln(b.out, "           the load generator's and other users' too) per row or request, from perf_event_open; it does")
		fmt.Fprintln(b.out, "           not grow when a shared machine is slow, so it compares builds measured at different hours")
	}
	printWALNote(b.out)
	if b.limiter != nil {
		fmt.Fprintln(b.out, "limiter:   off = the server token (server writes skip the limiter), on = each user's own player token")
		fmt.Fprintln(b.out, "           (the GCRA of LEADERBOARD_RATE_LIMIT: one Redis script call per write); each setting's runs taken")
		fmt.Fprintln(b.out, "           together: accepted/s = 202s within the runs' windows / the windows' sum, vs off = on / off;")
		fmt.Fprintln(b.out, "           µs/acc = CPU µs per accepted write from each run's start until drained ('window' in the JSON")
		fmt.Fprintln(b.out, "           when a run did not drain); scripts/acc = Redis EVAL/EVALSHA/FCALL calls of every client per 202")
	}
	fmt.Fprintln(b.out, "reads:     vs /healthz = req/s / the GET /healthz req/s of the same run (the bare HTTP ceiling);")
	fmt.Fprintln(b.out, "           big: page walk = each reader follows next_cursor from the first page (size 100) and starts")
	fmt.Fprintln(b.out, "           over at the end, so it measures pages from the top down to the depth a reader reaches")
}

func (b *bench) printMemory() {
	if r := b.big; r != nil {
		fmt.Fprintf(b.out, "\nbig board %q: %d entries seeded in %.1fs (insert %.1fs + analyze %.1fs), rebuilt into Redis in %.1fs (service: %d ms, %d entries)\n",
			r.Board, r.Entries, r.SeedS, r.InsertS, r.AnalyzeS, r.RebuildS, r.RebuildTookMs, r.RebuildEntries)
		if r.ZCard > 0 {
			fmt.Fprintf(b.out, "  Redis memory: %.1f MB for %d entries = %.1f bytes per entry (MEMORY USAGE SAMPLES 0: %s)\n",
				float64(r.RedisTotal)/(1<<20), r.ZCard, r.BytesPerEntry, fmtBytes(r.RedisBytes))
		}
		for _, ph := range b.reads {
			if ph.maxDepth.Load() > 0 {
				fmt.Fprintf(b.out, "  page walks: %d pages past the first, deepest page %d (entries %d..%d), %d walks reached the end\n",
					ph.pagesDeep.Load(), ph.maxDepth.Load(), ph.maxDepth.Load()*100+1, ph.maxDepth.Load()*100+100, ph.restarts.Load())
			}
		}
		if r.Error != "" {
			fmt.Fprintf(b.out, "  error: %s\n", r.Error)
		}
	}
	if m := b.matchMem; m != nil {
		fmt.Fprintf(b.out, "\nmemory per match of %d players (match %s, -match-size %d): %d bytes in Redis, %.1f bytes per entry (%s)\n",
			m.Players, m.MatchID, m.MatchSize, m.RedisTotal, m.BytesPerEntry, fmtBytes(m.RedisBytes))
	}
}

func fmtBytes(m map[string]int64) string {
	var parts []string
	for _, s := range redisSuffixes {
		if v, ok := m[s]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", s, v))
		}
	}
	return strings.Join(parts, ", ")
}

func (b *bench) printCheck() {
	c := b.check
	if c == nil {
		return
	}
	verdict := "PASS"
	if !c.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(b.out, "\nexactly-once: %s  (202s %d: %s; score_history rows %d of %d wanted, drained %v after %.1fs)\n", verdict, c.Accepted,
		fmtKinds(c.AcceptedByKind), c.HistoryRows, c.WantRows, c.Drained, c.DrainWaitS)
	fmt.Fprintf(b.out, "  score_history: missing %d, extra %d, duplicated %d, wrong rows %d, partial %d; score_requests missing %d; improving scores answered unchanged %d\n", c.Missing, c.Extra, c.Duplicated, c.WrongRows, c.Partial, c.RequestsMissing, c.LostUnchanged)
	fmt.Fprintf(b.out, "  board_entries (%d entries, %d users on global): wrong %d, missing %d, extra %d\n", c.Entries, c.Users, c.PGWrong, c.PGMissing, c.PGExtra)
	fmt.Fprintf(b.out, "  redis hash: wrong %d, missing %d, extra %d; sorted set mismatches %d (global zcard %d)\n", c.RedisWrong, c.RedisMissing, c.RedisExtra, c.RedisZSetWrong, c.RedisZCard)
	for _, name := range []string{globalBoard, pointsBoard, "match", dailyBoard, seasonBoard} {
		if bc := c.Boards[name]; bc != nil {
			fmt.Fprintf(b.out, "    %-7s %d periods, %d entries: PostgreSQL wrong %d missing %d extra %d; Redis wrong %d missing %d extra %d zset %d\n",
				name, bc.Periods, bc.Entries, bc.PGWrong, bc.PGMissing, bc.PGExtra, bc.RedisWrong, bc.RedisMissing, bc.RedisExtra, bc.RedisZSetWrong)
		}
	}
	for name, bc := range c.Boards {
		switch name {
		case globalBoard, pointsBoard, "match", dailyBoard, seasonBoard:
			continue
		}
		fmt.Fprintf(b.out, "    %-7s unexpected entries: PostgreSQL %d\n", name, bc.PGExtra)
	}
	fmt.Fprintf(b.out, "  ambiguous sends (5xx or no answer) %d, of which applied once %d; dead letters %d\n", c.Ambiguous, c.AmbiguousApplied, c.DeadLetters)
	if c.Error != "" {
		fmt.Fprintf(b.out, "  check error: %s\n", c.Error)
	}
	for _, e := range c.Examples {
		fmt.Fprintf(b.out, "  - %s\n", e)
	}
}

func fmtKinds(m map[string]int64) string {
	var parts []string
	for _, k := range kindNames {
		if n, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	return strings.Join(parts, ", ")
}

// writeJSON writes the summary file.
func (b *bench) writeJSON(path string) error {
	type procs struct {
		ServicePID    int      `json:"service_pid"`
		PostmasterPID int      `json:"postmaster_pid"`
		RedisPID      int      `json:"redis_pid"`
		Database      string   `json:"database"`
		ClockTicks    float64  `json:"clock_ticks_per_s"`
		Notes         []string `json:"notes,omitempty"`
	}
	out := struct {
		Machine    string         `json:"machine"`
		FinishedAt time.Time      `json:"finished_at"`
		Config     config         `json:"config"`
		Processes  procs          `json:"processes"`
		Idle       *cpuUsage      `json:"idle_cpu,omitempty"`
		Writes     []writeReport  `json:"writes"`
		Limiter    *limiterReport `json:"limiter,omitempty"`
		Ceiling    *readReport    `json:"healthz_ceiling,omitempty"`
		Reads      []readReport   `json:"reads"`
		BigBoard   *bigReport     `json:"big_board,omitempty"`
		MatchMem   *matchMemory   `json:"match_memory,omitempty"`
		Poller     pollerStats    `json:"visibility_poller"`
		Check      *checkReport   `json:"exactly_once,omitempty"`
		Verdict    string         `json:"verdict"`
	}{Machine: machine(), FinishedAt: time.Now().UTC(), Poller: b.vis.stats(), Config: b.cfg, Check: b.check, Verdict: "not checked",
		Idle: b.idle, BigBoard: b.big, MatchMem: b.matchMem, Limiter: b.limiterReport(b.limiter),
		Processes: procs{b.procs.servicePID, b.procs.postmasterPID, b.procs.redisPID, b.procs.dbName, b.procs.hz, b.procs.notes}}
	for _, ph := range b.writes {
		out.Writes = append(out.Writes, b.writeReport(ph))
	}
	if b.ceiling != nil {
		r := b.readReport(b.ceiling)
		out.Ceiling = &r
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
