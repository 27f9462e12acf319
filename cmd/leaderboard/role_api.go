package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/openleaderboard/leaderboard/handlers"
	lbhttp "github.com/openleaderboard/leaderboard/http"
	"github.com/openleaderboard/leaderboard/router"
	"github.com/openleaderboard/leaderboard/storage"
)

// startAPI runs the API role on the process's web server: the HTTP API with its outbox, and the notifier that
// feeds this process's realtime streams.
func startAPI(ctx context.Context, g *errgroup.Group, d deps, ready *readiness, web *web) error {
	batchSize := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "leaderboard_outbox_batch_size", Help: "Commands per outbox transaction (group commit).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 9)})
	commitTime := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "leaderboard_outbox_commit_seconds", Help: "Time of one outbox transaction.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)})
	d.reg.MustRegister(batchSize, commitTime)
	outbox := storage.NewOutbox(d.db, d.schema, storage.OutboxConfig{
		Shards: d.cfg.OutboxShards, MaxBatch: d.cfg.OutboxBatch, Linger: d.cfg.OutboxLinger,
		Observe: func(n int, took time.Duration) { batchSize.Observe(float64(n)); commitTime.Observe(took.Seconds()) },
	}, d.logger)
	ranks := storage.NewRanks(d.pool).WithLogger(d.logger)
	periods := lbhttp.NewPeriods(d.cfg, storage.NewSeasons(d.pool), d.now)
	pipe := storage.NewPipe(d.rdb, d.cfg.RedisTimeout, 0) // reads
	// The write path's value reads and rate limits, in pipelines that wait a little for
	// other writes' (at 2,000 writes/s, 2 ms took Redis from ~102 to ~86 µs per write).
	writePipe := storage.NewPipe(d.rdb, d.cfg.RedisTimeout, d.cfg.WriteLinger)
	reads := lbhttp.NewReads(d.cfg, periods, d.boards.WithPipe(pipe), ranks, storage.Mirror{Boards: d.boards, Ranks: ranks}).
		WithClosedPeriods(ranks.Closed())
	hub := lbhttp.NewHub(lbhttp.HubConfig{MaxStreams: d.cfg.SSEMaxStreams, MaxStreamsPerUser: d.cfg.SSEMaxStreamsPerUser,
		NextReset: periods.NextResetOf, Tops: d.boards.WithPipe(pipe), Kept: periods.Kept}, reads, d.reg)
	g.Go(func() error {
		// Its Kafka subscribers' close waits for a broker that stopped answering: bounded.
		if !router.AwaitStop(ctx, notifierCloseTimeout, func() { runNotifier(ctx, d, hub) }) {
			d.logger.Warn("realtime notifier not stopped in time; left behind", "after", notifierCloseTimeout)
		}
		return nil
	})
	g.Go(func() error { lbhttp.WatchSeasons(ctx, periods, hub, time.Second); return nil })
	// A top swapped in without a notification (another process's rebuild) or one lost on
	// the way reaches the streams within this; so do the tops while Kafka is unreachable.
	g.Go(func() error { lbhttp.RefreshTops(ctx, hub, 5*time.Second, d.logger); return nil })
	bans := lbhttp.NewBanList(storage.NewBans(d.pool), time.Second, d.logger)
	if err := bans.Load(ctx); err != nil {
		return err
	}
	g.Go(func() error { return bans.Run(ctx) })
	anomalyStore := storage.NewAnomalies(d.pool)
	anomalies := lbhttp.NewAnomalyRecorder(anomalyStore, 10_000, d.reg, d.logger)
	g.Go(func() error { return anomalies.Run(ctx) })
	maint := storage.NewOutboxMaintenance(d.pool, d.schema)
	backlog := lbhttp.NewBacklog(func(ctx context.Context, upTo int64) (int64, error) {
		return maint.Outstanding(ctx, d.cfg.OutboxShards, upTo)
	}, int64(d.cfg.MaxBacklog), time.Second, d.reg, d.logger)
	g.Go(func() error { return backlog.Run(ctx) })
	limiter := storage.NewLimiter(d.rdb, d.cfg.RedisPrefix, writePipe)
	guard := lbhttp.NewGuard(d.cfg, backlog, limiter, bans, anomalies, d.reg, d.now, d.logger)
	audit := storage.NewAuditLog(d.pool)
	handler := lbhttp.NewServer(lbhttp.Deps{
		Config: d.cfg, Logger: d.logger, Commands: outbox, Requests: storage.NewRequestLog(d.pool),
		Periods: periods, Reads: reads, Now: d.now,
		Ready: ready.Failing, Registry: d.reg, WaitTimeout: d.cfg.WaitTimeout,
		Hub: hub, Realtime: lbhttp.RealtimeConfig{Heartbeat: d.cfg.SSEHeartbeat},
		DeadLetters: storage.NewDeadLetterAdmin(d.db, d.schema, d.cfg.OutboxShards),
		Maintenance: storage.Maintenance{Boards: d.boards, Ranks: ranks, Audit: audit},
		Guard:       guard,
		Moderation:  lbhttp.Moderation{Commands: outbox, Bans: bans, BanStore: storage.NewBans(d.pool), Anomalies: anomalyStore, Audit: audit, Holds: d.boards},
		Values:      storage.NewValueReader(d.boards, writePipe),
	})
	web.serve(ctx, g, handler, hub.Close, outbox.Close, pipe.Close, writePipe.Close)
	return nil
}

// notifierCloseTimeout bounds the notifier's stop once ctx ended.
const notifierCloseTimeout = 5 * time.Second

// runNotifier feeds the hub from Kafka's notification topics until ctx ends, starting its
// router again a second after it could not start (Kafka unreachable when the process
// started) or stopped. The API does not depend on Kafka: writes go to the outbox, reads to
// Redis and PostgreSQL, and the streams' tops refresh from Redis meanwhile (RefreshTops),
// so it starts, and is ready, while Kafka is down.
func runNotifier(ctx context.Context, d deps, hub *lbhttp.Hub) {
	var current atomic.Pointer[message.Router] // the router running or trying to, nil before the first
	_ = d.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leaderboard_realtime_notifier_up",
		Help: "1 while the API's notifier reads Kafka's notification topics for the streams, 0 while it cannot."},
		func() float64 {
			if r := current.Load(); r != nil && r.IsRunning() && !r.IsClosed() {
				return 1
			}
			return 0
		}))
	var logged time.Time
	for {
		// Built only once Kafka answers with the topics: a router whose subscription fails
		// leaves a goroutine and a Kafka client behind (NotificationTopicsReady).
		err := router.NotificationTopicsReady(ctx, d.brokers, d.topics)
		if err == nil {
			var notifier *message.Router
			notifier, err = router.NewNotifierRouter(d.brokers, d.topics,
				handlers.NotifyTopChanged{Feed: hub, Logger: d.logger}.Handle,
				handlers.NotifyScoresApplied{Feed: hub, Logger: d.logger}.Handle, d.reg, d.logger)
			if err == nil {
				current.Store(notifier)
				err = notifier.Run(ctx)
			}
		}
		if ctx.Err() != nil {
			return
		}
		if time.Since(logged) >= time.Minute { // not every second of an outage
			logged = time.Now()
			d.logger.Warn("realtime notifier is not running; trying again every second (streams refresh their tops from Redis meanwhile)", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
