package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// machineCaveat qualifies every figure the bench prints.
const machineCaveat = "2 cores, shared; service, PostgreSQL, Redis, broker and load generator on one machine"

// bench holds the connections and state shared by the phases.
type bench struct {
	cfg    config
	out    io.Writer
	api    *api
	rdb    *redis.Client
	pg     *pgx.Conn
	users  *users
	ledger *ledger
	vis    *visibility

	stopPoller context.CancelFunc
	pollerDone sync.WaitGroup

	writes []*writePhase
	reads  []*readPhase
	check  *checkReport
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
	b := &bench{cfg: cfg, out: out, api: a, rdb: rdb, users: newUsers(cfg.Users, cfg.UserPrefix), ledger: &ledger{}}
	if cfg.Check {
		if b.pg, err = pgx.Connect(ctx, cfg.Postgres); err != nil {
			b.close()
			return nil, fmt.Errorf("postgres: %w", err)
		}
	}
	b.vis = newVisibility(rdb, cfg.Prefix, b.users.names, cfg.PollInterval, cfg.PollChunk)
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
	fmt.Fprintf(b.out, "loadgen: %s\n\n", machineCaveat)
	if b.cfg.runs(phaseRate) && ctx.Err() == nil {
		fmt.Fprintf(b.out, "phase A: %.0f submissions/s offered for %s, open loop, at most %d in flight\n", b.cfg.Rate, b.cfg.Duration, b.cfg.MaxInflight)
		b.writePhase(ctx, b.runFixedRate(ctx))
	}
	if b.cfg.runs(phaseSaturation) && ctx.Err() == nil {
		fmt.Fprintf(b.out, "phase B: %d closed-loop writers for %s\n", b.cfg.Concurrency, b.cfg.Duration)
		b.writePhase(ctx, b.runSaturation(ctx))
	}
	if b.cfg.runs(phaseReads) && ctx.Err() == nil {
		fmt.Fprintf(b.out, "reads: %d closed-loop readers, %s per kind\n", b.cfg.Concurrency, b.cfg.ReadDuration)
		b.reads = b.readPhases(ctx)
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
	fmt.Fprintf(b.out, "  waiting up to %s for %d accepted scores to show in Redis...\n", b.cfg.VisTimeout, ph.visPending.Load())
	ph.notVisible = b.vis.waitPhase(ctx, ph, b.cfg.VisTimeout)
	b.printVisibility(ph)
	b.settle(ctx, ph)
	fmt.Fprintln(b.out)
}

// settle waits until the pipeline has applied every score accepted so far, so the next
// phase does not start on this one's backlog, and records how long that took after the
// phase's last answer.
func (b *bench) settle(ctx context.Context, ph *writePhase) {
	if b.pg == nil || ctx.Err() != nil {
		return
	}
	var want, maybe int64
	for _, e := range b.ledger.all() {
		switch e.outcome {
		case accepted:
			want++
		case ambiguous:
			maybe++
		}
	}
	rows, _, drained, err := b.waitPipeline(ctx, want, maybe, b.cfg.DrainTimeout)
	switch {
	case err != nil:
		fmt.Fprintf(b.out, "  settle: %v\n", err)
	case !drained:
		fmt.Fprintf(b.out, "  settle: pipeline did not drain within %s (score_history %d rows, %d accepted); next phase starts on a backlog\n", b.cfg.DrainTimeout, rows, want)
	default:
		ph.drainedAfter = time.Since(ph.end)
		fmt.Fprintf(b.out, "  pipeline drained (score_history %d rows) %.1fs after the phase's last answer\n", rows, ph.drainedAfter.Seconds())
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
