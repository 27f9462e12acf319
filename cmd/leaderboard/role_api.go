package main

import (
	"context"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/openleaderboard/leaderboard/handlers"
	lbhttp "github.com/openleaderboard/leaderboard/http"
	"github.com/openleaderboard/leaderboard/router"
	"github.com/openleaderboard/leaderboard/storage"
)

// startAPI runs the API role on ln: the HTTP API with its outbox, and the notifier that
// feeds this process's realtime streams.
func startAPI(ctx context.Context, g *errgroup.Group, d deps, ready *readiness, ln net.Listener) error {
	batchSize := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "leaderboard_outbox_batch_size", Help: "Commands per outbox transaction (group commit).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 9)})
	commitTime := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "leaderboard_outbox_commit_seconds", Help: "Time of one outbox transaction.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)})
	d.reg.MustRegister(batchSize, commitTime)
	outbox := storage.NewOutbox(d.db, d.schema, storage.OutboxConfig{
		Shards: d.cfg.OutboxShards, DestinationTopic: d.topics.Scores, MaxBatch: d.cfg.OutboxBatch,
		Observe: func(n int, took time.Duration) { batchSize.Observe(float64(n)); commitTime.Observe(took.Seconds()) },
	}, d.logger)
	hub := lbhttp.NewHub(lbhttp.HubConfig{MaxStreams: d.cfg.SSEMaxStreams, MaxStreamsPerUser: d.cfg.SSEMaxStreamsPerUser}, d.boards, d.reg)
	notifier, err := router.NewNotifierRouter(d.brokers, d.topics,
		handlers.NotifyTopChanged{Feed: hub, Logger: d.logger}.Handle,
		handlers.NotifyScoresApplied{Feed: hub, Logger: d.logger}.Handle, d.reg, d.logger)
	if err != nil {
		return err
	}
	g.Go(func() error { return notifier.Run(ctx) })
	ready.routers = append(ready.routers, notifier.IsRunning)
	ranks := storage.NewRanks(d.pool)
	handler := lbhttp.NewServer(lbhttp.Deps{
		Config: d.cfg, Logger: d.logger, Commands: outbox, Boards: d.boards, Requests: storage.NewRequestLog(d.pool),
		Ready: ready.failing, Registry: d.reg, WaitTimeout: d.cfg.WaitTimeout,
		Hub: hub, Realtime: lbhttp.RealtimeConfig{Heartbeat: d.cfg.SSEHeartbeat},
		DeadLetters: storage.NewDeadLetterAdmin(d.db, d.schema, d.cfg.OutboxShards),
		Fallback:    ranks,
		Maintenance: storage.Maintenance{Boards: d.boards, Ranks: ranks, Audit: storage.NewAuditLog(d.pool)},
	})
	serveHTTP(ctx, g, ln, handler, d.logger, hub.Close, outbox.Close)
	return nil
}
