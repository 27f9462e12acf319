package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// fanout is one `loadgen fanout` run: open the streams, drive top changes, measure what
// the streams received.
type fanout struct {
	cfg  fanoutConfig
	out  io.Writer
	apis []*api // one per target; the first one writes and polls

	streams   []*stream
	closing   atomic.Bool
	readers   sync.WaitGroup
	attempts  sync.WaitGroup
	connected atomic.Int64
	dropped   atomic.Int64

	driver   *driver
	accepted map[string]time.Time // leader user -> its 202, from the driver (this process's or the peer's)
	watch    *versionWatch
	procs    *procWatch
	marks    fanoutMarks
}

// fanoutMarks are the moments and samples the report is computed from.
type fanoutMarks struct {
	fileLimit                    uint64
	rampStart, rampEnd           time.Time
	driveStart, driveEnd, end    time.Time
	baseVersion, finalVersion    int64
	procIdle, procRamp, procEnd  map[int]procSample
	peakRamp, peakDrive          map[int]int64
	metrics0, metrics1, metrics2 []sseMetrics
	cpuRamp, cpuDrive            time.Duration // the loadgen's own
	machine0, machine1, machine2 machineCPU    // /proc/stat at the same marks
	tcp0, tcp1, tcp2             map[string]int64
	onLatest                     int64         // streams on finalVersion at the end of the settle
	convergedAfter               time.Duration // from the end of the settle until every open stream held finalVersion; -1 if not
}

// quietBeforeDrive separates the ramp from the drive.
const quietBeforeDrive = time.Second

// runFanout is `loadgen fanout`.
func runFanout(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := parseFanoutConfig(args, getenv, stdout)
	if err != nil {
		return err
	}
	// Tens of thousands of small, long-lived buffers: collect less often, there is memory.
	debug.SetGCPercent(400)
	f := &fanout{cfg: cfg, out: stdout}
	for _, t := range cfg.Targets {
		a, err := newAPI(config{Target: t, Secret: cfg.Secret, MaxInflight: 64, Concurrency: 16, ReqTimeout: 10 * time.Second})
		if err != nil {
			return err
		}
		defer a.close()
		f.apis = append(f.apis, a)
	}
	return f.run(ctx)
}

func (f *fanout) logf(format string, args ...any) {
	prefix := "fanout"
	if f.cfg.Name != "" {
		prefix += "[" + f.cfg.Name + "]"
	}
	fmt.Fprintf(f.out, prefix+": "+format+"\n", args...)
}

func (f *fanout) run(ctx context.Context) error {
	limit, err := raiseFileLimit()
	if err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE: %w", err)
	}
	f.marks.fileLimit = limit
	if limit > 0 && uint64(f.cfg.Clients)+100 > limit {
		f.logf("WARNING: open-file limit %d: this process cannot hold %d streams (about %d at most)", limit, f.cfg.Clients, limit-100)
	}
	if err := f.preflight(ctx); err != nil {
		return err
	}
	f.procs = newProcWatch(f.cfg.PIDs, 250*time.Millisecond)
	defer f.procs.stop()
	f.watch = &versionWatch{api: f.apis[0]}
	wctx, stopWatch := context.WithCancel(context.Background())
	var watching sync.WaitGroup
	defer func() { stopWatch(); watching.Wait() }()

	if f.cfg.Drive {
		f.driver = newDriver(f.apis[0])
		if err := f.driver.seed(ctx, f.cfg.Seed); err != nil {
			return err
		}
	}
	f.marks.procIdle, _ = f.procs.mark()
	f.marks.machine0, f.marks.tcp0 = readMachineCPU(), readTCPCounters()
	f.marks.metrics0 = f.scrape(ctx)

	f.logf("ramping %d streams over %v at %.0f/s (open-file limit %d)", f.cfg.Clients, f.cfg.Targets, f.cfg.RampRate, limit)
	cpu0 := cpuTime()
	f.ramp(ctx)
	f.marks.cpuRamp = cpuTime() - cpu0
	f.marks.procRamp, f.marks.peakRamp = f.procs.mark()
	f.marks.machine1, f.marks.tcp1 = readMachineCPU(), readTCPCounters()
	f.marks.metrics1 = f.scrape(ctx)
	f.logf("ramp done in %.1fs: %d connected of %d", f.marks.rampEnd.Sub(f.marks.rampStart).Seconds(), f.connected.Load(), f.cfg.Clients)

	watching.Add(1)
	go func() { defer watching.Done(); f.watch.run(wctx, f.cfg.PollInterval) }()
	if err := f.barrier(ctx); err != nil {
		f.logf("%v; going on without the peers", err)
	}
	// The hub holds an event back until hubWindow has passed since the stream's previous
	// one, the snapshot included: start once the last snapshots are out of that window.
	sleepCtx(ctx, quietBeforeDrive)
	f.watch.poll(ctx)
	f.marks.baseVersion = f.watch.latest()

	cpu1 := cpuTime()
	f.drive(ctx)
	if ctx.Err() == nil && f.cfg.Settle > 0 {
		f.logf("settling for %s", f.cfg.Settle)
		sleepCtx(ctx, f.cfg.Settle)
	}
	f.watch.poll(ctx)
	f.marks.finalVersion = f.watch.latest()
	f.marks.onLatest = f.onLatest()
	f.marks.end = time.Now()
	f.marks.cpuDrive = cpuTime() - cpu1
	f.marks.procEnd, f.marks.peakDrive = f.procs.mark()
	f.marks.machine2, f.marks.tcp2 = readMachineCPU(), readTCPCounters()
	f.marks.metrics2 = f.scrape(context.Background())
	stopWatch()
	watching.Wait()
	f.converge(ctx)

	f.closeStreams()
	rep := f.report()
	rep.print(f.out)
	if f.cfg.Out != "" {
		if err := rep.writeJSON(f.cfg.Out); err != nil {
			return err
		}
		f.logf("report written to %s", f.cfg.Out)
	}
	return ctx.Err()
}

// onLatest counts the open streams holding the final version.
func (f *fanout) onLatest() int64 {
	var n int64
	for _, s := range f.streams {
		if s != nil && s.outcome == connected && s.last.Load() >= f.marks.finalVersion {
			n++
		}
	}
	return n
}

// converge waits, up to -settle-max, until every stream still open holds the final
// version, and records how long that took after the settle.
func (f *fanout) converge(ctx context.Context) {
	f.marks.convergedAfter = -1
	start := time.Now()
	deadline := start.Add(f.cfg.SettleMax)
	for n := f.marks.onLatest; ; n = f.onLatest() {
		if n >= f.connected.Load()-f.dropped.Load() {
			f.marks.convergedAfter = time.Since(start)
			return
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			f.logf("after %s more, %d of %d open streams hold version %d", f.cfg.SettleMax, n, f.connected.Load()-f.dropped.Load(), f.marks.finalVersion)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// preflight checks every target answers, then waits for earlier runs' streams to close.
func (f *fanout) preflight(ctx context.Context) error {
	for _, a := range f.apis {
		ans, err := a.do(ctx, http.MethodGet, "/readyz", nil)
		if err != nil {
			return fmt.Errorf("service not reachable at %s: %w", a.base, err)
		}
		if ans.status != http.StatusOK {
			return fmt.Errorf("service at %s not ready: /readyz answered %d %s", a.base, ans.status, ans.body)
		}
	}
	if _, err := getTop(ctx, f.apis[0], 1); err != nil {
		return fmt.Errorf("token rejected or reads failing: %w", err)
	}
	deadline := time.Now().Add(f.cfg.IdleTimeout)
	for {
		open := 0.0
		for _, m := range f.scrape(ctx) {
			open += m.Streams
		}
		if open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			f.logf("WARNING: the targets still hold %.0f streams after %s; starting anyway", open, f.cfg.IdleTimeout)
			return nil
		}
		sleepCtx(ctx, 250*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (f *fanout) scrape(ctx context.Context) []sseMetrics {
	out := make([]sseMetrics, len(f.apis))
	for i, a := range f.apis {
		out[i] = scrapeSSE(ctx, a.client, a.base)
	}
	return out
}
