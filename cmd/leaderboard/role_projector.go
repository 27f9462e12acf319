package main

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/openleaderboard/leaderboard/handlers"
	"github.com/openleaderboard/leaderboard/router"
	"github.com/openleaderboard/leaderboard/storage"
)

// projectorCloseTimeout bounds the end of the projector's batches in flight and of its
// notifications once its router stopped.
const projectorCloseTimeout = 5 * time.Second

// startProjector runs the projector role: the Kafka consumer group that applies score
// events to PostgreSQL and Redis and publishes what changed. The returned func releases
// what outlives the router (the lag collector's client).
func startProjector(ctx context.Context, g *errgroup.Group, d deps, ready *readiness) (func(), error) {
	wlog := router.NewLogger(d.logger)
	sub, err := router.NewKafkaSubscriber(d.brokers, router.ProjectorGroup, d.cfg.ProjectorWindow, wlog)
	if err != nil {
		return func() {}, err
	}
	pub, err := router.NewKafkaPublisher(d.brokers, wlog)
	if err != nil {
		return func() {}, err
	}
	changes := handlers.NewChangePublisher(pub, d.topics.Notifications, d.topics.UserUpdates, d.logger)
	mirror := storage.Mirror{Boards: d.boards, Ranks: storage.NewRanks(d.pool).WithLogger(d.logger)}
	apply := handlers.NewApplyScore(storage.NewProjection(d.pool).WithOutbox(d.cfg.OutboxShards), mirror, changes, handlers.ApplyScoreConfig{
		Config: d.cfg, Now: d.now, Workers: d.cfg.ProjectorWorkers, MaxBatch: d.cfg.ProjectorBatch,
		Linger: d.cfg.ProjectorLinger,
	}, handlers.NewProjectorMetrics(d.reg), d.logger)
	stuck := router.NewStuckPartitions(time.Now)
	d.reg.MustRegister(stuck)
	sub.OnRelease(stuck.Release)
	throttle := router.Throttle{N: d.cfg.ProjectorThrottle.N, Per: d.cfg.ProjectorThrottle.Per}
	projector, err := router.NewProjectorRouter(sub, d.topics.Scores, apply.Handle, storage.NewDeadLetters(d.pool), stuck, throttle, d.reg, d.logger)
	if err != nil {
		return func() {}, err
	}
	lag, closeLag, err := router.NewConsumerLagCollector(d.brokers, router.ProjectorGroup, d.topics.Scores)
	if err != nil {
		return func() {}, err
	}
	d.reg.MustRegister(lag)
	g.Go(func() error {
		err := projector.Run(ctx)
		// The batches in flight finish and their notifications go out, within a bound: a
		// broker that stopped answering must not keep a stopping process (a notification
		// lost then is made good by the streams' refresh).
		closed := router.CloseWithin(projectorCloseTimeout, "projector's batches and notifications", func() error {
			apply.Close()
			changes.Close()
			return pub.Close()
		})
		if errors.Is(closed, router.ErrNotClosed) {
			d.logger.Warn("projector stopping: left behind", "err", closed)
			closed = nil
		}
		return errors.Join(err, closed)
	})
	ready.routers = append(ready.routers, projector.IsRunning)
	ready.checks = append(ready.checks, check{"projector", func() bool { return stuck.Longest() <= d.cfg.ProjectorStuckAfter }})
	return func() { _ = closeLag() }, nil
}
