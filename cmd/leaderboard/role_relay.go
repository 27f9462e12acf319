package main

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/openleaderboard/leaderboard/router"
	"github.com/openleaderboard/leaderboard/storage"
)

// startRelay runs the relay role: the outbox forwarders to Kafka, the maintenance of the
// tables the pipeline churns, and the pruning of what is kept for a while only.
func startRelay(ctx context.Context, g *errgroup.Group, d deps, ready *readiness) error {
	relay, err := router.NewRelay(storage.NewOutboxMaintenance(d.pool, d.schema), router.RelayConfig{
		Shards: d.cfg.OutboxShards, Brokers: d.brokers, Topic: d.topics.Scores, PollInterval: d.cfg.RelayPollInterval,
		PruneInterval: d.cfg.OutboxPruneInterval, Batch: d.cfg.RelayBatch, Throttle: d.cfg.RelayThrottle.PerSecond(),
		Linger: d.cfg.RelayLinger,
	}, d.reg, d.logger)
	if err != nil {
		return err
	}
	g.Go(func() error { return relay.Run(ctx) })
	maint := storage.NewTableMaintenance(d.pool, d.schema, d.cfg.OutboxShards, 15*time.Second, time.Second, d.logger)
	g.Go(func() error {
		if err := maint.Run(ctx); err != nil && ctx.Err() == nil {
			d.logger.Warn("table maintenance stopped", "err", err)
		}
		return nil
	})
	retention := storage.NewRetention(d.pool, storage.RetentionConfig{
		EventIDs: d.cfg.EventIDRetention, History: d.cfg.HistoryRetention, Anomalies: d.cfg.AnomaliesKeep,
		Interval: d.cfg.RetentionInterval, Now: d.now,
	}, d.logger)
	g.Go(func() error { return retention.Run(ctx) })
	ready.routers = append(ready.routers, func() bool { return isClosed(relay.Running()) })
	return nil
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
