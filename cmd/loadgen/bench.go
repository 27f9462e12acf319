package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// machineCaveat qualifies every figure the bench prints.
const machineCaveat = "2 cores, shared; service, PostgreSQL, Redis, broker and load generator on one machine"

// postgresSettings names the PostgreSQL settings that move its CPU per score most (memory
// and pages, WAL room, checkpoints), as the server has them; "" when it cannot say.
func (b *bench) postgresSettings(ctx context.Context) string {
	var out string
	err := b.pg.QueryRow(ctx, `SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name) FROM pg_settings
		WHERE name IN ('shared_buffers', 'huge_pages', 'max_wal_size', 'checkpoint_timeout', 'autovacuum', 'synchronous_commit')`).Scan(&out)
	if err != nil {
		return ""
	}
	return out
}

// thpEnabled is where Linux says its transparent huge pages mode.
const thpEnabled = "/sys/kernel/mm/transparent_hugepage/enabled"

// machine is machineCaveat with the kernel's transparent huge pages mode, which moves the
// Go processes' CPU per score by several percent (Go's runtime does not advise its heap,
// so under madvise it runs on 4 KB pages).
func machine() string {
	if mode := thpMode(thpEnabled); mode != "" {
		return machineCaveat + "; transparent huge pages: " + mode
	}
	return machineCaveat
}

// thpMode is the bracketed mode of a transparent_hugepage/enabled file ("always [madvise]
// never" is madvise), or "" when it cannot be read.
func thpMode(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(string(raw), "[")
	mode, _, ok2 := strings.Cut(rest, "]")
	if !ok || !ok2 {
		return ""
	}
	return mode
}

// bench holds the connections and state shared by the phases.
type bench struct {
	cfg     config
	out     io.Writer
	api     *api
	rdb     *redis.Client
	pg      *pgx.Conn
	users   *users
	matches *matches
	ledger  *ledger
	vis     *visibility
	procs   *procGroups
	// periods are the periods the service named current for daily and season while the
	// mixed phase ran (board -> set).
	periods map[string]map[string]bool

	stopPoller context.CancelFunc
	pollerDone sync.WaitGroup

	writes   []*writePhase
	limiter  *limiterPhase // its runs are in writes too
	idle     *cpuUsage
	ceiling  *readPhase // GET /healthz: the bare HTTP ceiling
	reads    []*readPhase
	big      *bigReport
	matchMem *matchMemory
	check    *checkReport
}

func newBench(ctx context.Context, cfg config, out io.Writer) (*bench, error) {
	a, err := newAPI(cfg)
	if err != nil {
		return nil, err
	}
	ropts, err := redis.ParseURL(cfg.Redis)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	ropts.PoolSize = 8
	rdb := redis.NewClient(ropts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	b := &bench{cfg: cfg, out: out, api: a, rdb: rdb, users: newUsers(cfg.Users, cfg.UserPrefix), ledger: &ledger{},
		matches: newMatches(cfg.Users, cfg.MatchSize), periods: map[string]map[string]bool{}}
	// PostgreSQL: for the check, the pipeline's applied rows and the big board's seed.
	if b.pg, err = pgx.Connect(ctx, cfg.Postgres); err != nil {
		if cfg.Check || cfg.runs(phaseBigReads) {
			b.close()
			return nil, fmt.Errorf("postgres: %w", err)
		}
		fmt.Fprintf(out, "WARNING: postgres: %v; applied rows and CPU per applied row are not measured\n", err)
		b.pg = nil
	}
	b.vis = newVisibility(rdb, cfg.Prefix, b.users.names, b.matches, cfg.PollInterval, cfg.PollChunk, cfg.PollMaxReads)
	b.procs = newProcGroups(ctx, cfg.ServicePID, b.pg, cfg.Postgres, rdb)
	return b, nil
}

func (b *bench) close() {
	if b.stopPoller != nil {
		b.stopPoller()
		b.pollerDone.Wait()
	}
	if b.pg != nil {
		b.pg.Close(context.Background())
	}
	b.rdb.Close()
	b.api.close()
}

func (b *bench) run(ctx context.Context) error {
	if err := b.preflight(ctx); err != nil {
		return err
	}
	pctx, stop := context.WithCancel(context.Background())
	b.stopPoller = stop
	b.pollerDone.Add(1)
	go func() { defer b.pollerDone.Done(); b.vis.run(pctx) }()

	fmt.Fprintf(b.out, "loadgen: target %s, %d users, redis prefix %s\n", b.cfg.Target, b.cfg.Users, b.cfg.Prefix)
	fmt.Fprintf(b.out, "loadgen: %s\n", machine())
	if pg := b.postgresSettings(ctx); pg != "" {
		fmt.Fprintf(b.out, "loadgen: PostgreSQL %s\n", pg)
	}
	fmt.Fprintf(b.out, "loadgen: CPU by process: service pid %d, postmaster pid %d (database %s), redis pid %d, clock ticks %.0f/s\n",
		b.procs.servicePID, b.procs.postmasterPID, b.procs.dbName, b.procs.redisPID, b.procs.hz)
	for _, n := range b.procs.notes {
		fmt.Fprintf(b.out, "loadgen: NOTE: %s\n", n)
	}
	fmt.Fprintln(b.out)
	writes := b.cfg.runs(phaseRate) || b.cfg.runs(phaseSaturation) || b.cfg.runs(phaseLimiter) || b.cfg.runs(phaseMixed)
	if writes && b.cfg.IdleDuration > 0 && ctx.Err() == nil {
		fmt.Fprintf(b.out, "idle: %s with no load\n", b.cfg.IdleDuration)
		a := b.procs.sample()
		sleepCtx(ctx, b.cfg.IdleDuration)
		u := cpuBetween(a, b.procs.sample(), b.procs.hz)
		b.idle = &u
		fmt.Fprintf(b.out, "  cores used: %s\n\n", fmtCores(u))
	}
	if b.cfg.runs(phaseRate) && ctx.Err() == nil {
		fmt.Fprintf(b.out, "phase A: %.0f submissions/s offered for %s, open loop, at most %d in flight\n", b.cfg.Rate, b.cfg.Duration, b.cfg.MaxInflight)
		b.writePhase(ctx, b.runFixedRate(ctx))
	}
	if b.cfg.runs(phaseSaturation) && ctx.Err() == nil {
		fmt.Fprintf(b.out, "phase B: %d closed-loop writers for %s\n", b.cfg.Concurrency, b.cfg.Duration)
		b.writePhase(ctx, b.runSaturation(ctx))
	}
	if b.cfg.runs(phaseLimiter) && ctx.Err() == nil {
		fmt.Fprintf(b.out, "limiter: best scores, %d closed-loop writers, %s per setting in %d rounds of off (server token) and on (player tokens), ordered off, on, on, off\n\n",
			b.cfg.Concurrency, b.cfg.LimiterDuration, limiterRounds)
		b.limiter = b.runLimiter(ctx)
		b.printLimiter(b.limiter)
		fmt.Fprintln(b.out)
	}
	if b.cfg.runs(phaseMixed) && ctx.Err() == nil {
		fmt.Fprintf(b.out, "mixed: %.0f commands/s offered for %s, open loop, at most %d in flight; mix %s; %d matches of %d players\n",
			b.cfg.MixedRate, b.cfg.Duration, b.cfg.MaxInflight, b.cfg.MixS, len(b.matches.ids), b.cfg.MatchSize)
		b.fetchPeriods(ctx)
		ph := b.runMixed(ctx)
		b.fetchPeriods(ctx)
		b.writePhase(ctx, ph)
		if b.cfg.Mix[kindMatch] > 0 {
			b.matchMem = b.measureMatchMemory(ctx)
		}
	}
	if (b.cfg.runs(phaseReads) || b.cfg.runs(phaseBigReads)) && ctx.Err() == nil {
		fmt.Fprintf(b.out, "bare HTTP ceiling: %d closed-loop readers of GET /healthz for %s\n", b.cfg.Concurrency, b.cfg.ReadDuration)
		b.ceiling = b.runReads(ctx, "/healthz", func(*readPhase) reader {
			return statelessReader(func() string { return "/healthz" })
		})
		b.printRead(b.ceiling)
		fmt.Fprintln(b.out)
	}
	if b.cfg.runs(phaseReads) && ctx.Err() == nil {
		fmt.Fprintf(b.out, "reads: %d closed-loop readers, %s per kind\n", b.cfg.Concurrency, b.cfg.ReadDuration)
		b.reads = append(b.reads, b.readPhases(ctx)...)
		fmt.Fprintln(b.out)
	}
	if b.cfg.runs(phaseBigReads) && ctx.Err() == nil {
		fmt.Fprintf(b.out, "bigreads: %d entries on board %s, %d closed-loop readers, %s per kind\n", b.cfg.BigEntries, b.cfg.BigBoard, b.cfg.Concurrency, b.cfg.ReadDuration)
		var reads []*readPhase
		b.big, reads = b.bigReads(ctx)
		b.reads = append(b.reads, reads...)
		fmt.Fprintln(b.out)
	}
	stop()
	b.pollerDone.Wait()
	b.stopPoller = nil

	if b.cfg.Check && ctx.Err() == nil {
		b.check = b.runCheck(ctx)
	}
	b.printTable()
	if b.cfg.Out != "" {
		if err := b.writeJSON(b.cfg.Out); err != nil {
			return err
		}
		fmt.Fprintf(b.out, "summary written to %s\n", b.cfg.Out)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if b.check != nil && !b.check.Pass {
		return errCheckFailed
	}
	return nil
}

// writePhase prints a finished write phase, then waits for its accepted scores to show in Redis.
func (b *bench) writePhase(ctx context.Context, ph *writePhase) {
	b.writes = append(b.writes, ph)
	b.printWrite(ph)
	fmt.Fprintf(b.out, "  waiting up to %s for %d accepted values to show in Redis...\n", b.cfg.VisTimeout, ph.visPending.Load())
	ph.notVisible = b.vis.waitPhase(ctx, ph, b.cfg.VisTimeout)
	b.printVisibility(ph)
	b.settle(ctx, ph)
	b.printPipeline(ph)
	if ph.drainedAfter > 0 { // applied per window means something once everything was applied
		b.measureApplied(ctx, ph)
		b.printWindows(ph)
	}
	fmt.Fprintln(b.out)
}

// settle waits until the pipeline has applied every command accepted so far, so the next
// phase does not start on this one's backlog, records how long that took after the
// phase's last answer, and marks the end of the phase's CPU window.
func (b *bench) settle(ctx context.Context, ph *writePhase) {
	if b.pg == nil || ctx.Err() != nil {
		return
	}
	want, maybe := b.ledger.pipelineRows()
	rows, _, drained, err := b.waitPipeline(ctx, want, maybe, b.cfg.DrainTimeout)
	switch {
	case err != nil:
		fmt.Fprintf(b.out, "  settle: %v\n", err)
	case !drained:
		fmt.Fprintf(b.out, "  settle: pipeline did not drain within %s (score_history %d rows, %d wanted); next phase starts on a backlog\n", b.cfg.DrainTimeout, rows, want)
	default:
		ph.drainedAfter = time.Since(ph.end)
		ph.m2 = b.mark(ctx)
		fmt.Fprintf(b.out, "  pipeline drained (score_history %d rows) %.1fs after the phase's last answer\n", rows, ph.drainedAfter.Seconds())
	}
}

// mark is a moment of a phase: the CPU time of every process group and, when PostgreSQL
// is at hand, the rows of score_history.
type mark struct {
	at  time.Time
	cpu cpuSample
	// rows is score_history's row count; extraRows those on daily and season, which only
	// match points write (a match point's second and third rows), so rows - extraRows
	// counts commands.
	rows, extraRows int64
	rowsOK          bool
	wal             walSample
}

func (b *bench) mark(ctx context.Context) mark {
	m := mark{cpu: b.procs.sample()}
	if b.pg != nil {
		err := b.pg.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE board_id IN ($1, $2)) FROM score_history`, dailyBoard, seasonBoard).Scan(&m.rows, &m.extraRows)
		m.rowsOK = err == nil
		m.wal = readWAL(ctx, b.pg)
	}
	m.at = time.Now()
	return m
}

// fetchPeriods records the current periods of daily and season (GET /v1/boards), the
// periods match points count for.
func (b *bench) fetchPeriods(ctx context.Context) {
	ans, err := b.api.do(ctx, http.MethodGet, "/v1/boards", nil)
	if err != nil || ans.status != http.StatusOK {
		key, sample := errorKey(ans, err)
		fmt.Fprintf(b.out, "  GET /v1/boards: %s %s\n", key, sample)
		return
	}
	var list struct {
		Boards []struct {
			ID            string `json:"id"`
			CurrentPeriod string `json:"current_period"`
		} `json:"boards"`
	}
	if err := json.Unmarshal(ans.body, &list); err != nil {
		fmt.Fprintf(b.out, "  GET /v1/boards: %v\n", err)
		return
	}
	for _, bd := range list.Boards {
		if bd.ID == dailyBoard || bd.ID == seasonBoard {
			if b.periods[bd.ID] == nil {
				b.periods[bd.ID] = map[string]bool{}
			}
			b.periods[bd.ID][bd.CurrentPeriod] = true
		}
	}
}

// preflight checks the service answers and the database holds no earlier bench's history.
func (b *bench) preflight(ctx context.Context) error {
	ans, err := b.api.do(ctx, http.MethodGet, "/readyz", nil)
	if err != nil {
		return fmt.Errorf("service not reachable at %s: %w", b.cfg.Target, err)
	}
	if ans.status != http.StatusOK {
		return fmt.Errorf("service not ready: /readyz answered %d %s", ans.status, ans.body)
	}
	ans, err = b.api.do(ctx, http.MethodGet, "/v1/leaderboard/top?limit=1", nil)
	if err != nil || ans.status != http.StatusOK {
		key, sample := errorKey(ans, err)
		return fmt.Errorf("token rejected or reads failing: %s %s", key, sample)
	}
	if b.pg == nil {
		return nil
	}
	var rows int64
	if err := b.pg.QueryRow(ctx, `SELECT count(*) FROM score_history`).Scan(&rows); err != nil {
		return fmt.Errorf("postgres: count score_history: %w", err)
	}
	if rows > 0 {
		fmt.Fprintf(b.out, "WARNING: score_history already holds %d rows; the exactly-once check expects a fresh database and will count them as extra\n", rows)
	}
	return nil
}

func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }
