package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// ScoreProjection applies events to PostgreSQL, idempotently by event id.
type ScoreProjection interface {
	Apply(ctx context.Context, events []storage.ScoreEvent) (storage.AppliedBatch, error)
}

// BoardMirror mirrors absolute entry states into Redis and keeps the cached top-N.
type BoardMirror interface {
	Apply(ctx context.Context, board, period string, states []storage.EntryState, nicks map[string]string, minVersion int64) (storage.Top, bool, error)
}

// ApplyScore is the projector: it applies ScoreSubmitted commands to PostgreSQL, then
// Redis, and publishes LeaderboardChanged when a board's top-N changed.
//
// Handle is called concurrently, once per Kafka partition; calls are gathered into
// batches so one PostgreSQL transaction and one Redis script serve many events.
type ApplyScore struct {
	projection ScoreProjection
	mirror     BoardMirror
	changes    *changePublisher
	boards     map[string]configs.Board
	logger     *slog.Logger
	queue      chan pendingEvent
	maxBatch   int
	metrics    applyMetrics
	closeOnce  sync.Once
	wg         sync.WaitGroup
}

type pendingEvent struct {
	event storage.ScoreEvent
	done  chan error
}

type applyMetrics struct {
	batchSize prometheus.Histogram
	stepTime  *prometheus.HistogramVec
	applied   *prometheus.CounterVec
	lag       prometheus.Histogram
}

// ApplyScoreConfig configures ApplyScore.
type ApplyScoreConfig struct {
	Boards []configs.Board
	// ChangesTopic receives LeaderboardChanged events.
	ChangesTopic string
	// UsersTopic receives ScoresApplied events (empty: not published).
	UsersTopic string
	// Workers is how many batches may be in flight at once (default 2).
	Workers int
	// MaxBatch bounds the events of one batch (default 500).
	MaxBatch int
}

// NewApplyScore starts the batch workers; Close stops them.
func NewApplyScore(p ScoreProjection, m BoardMirror, changes message.Publisher, cfg ApplyScoreConfig, reg prometheus.Registerer, logger *slog.Logger) *ApplyScore {
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 500
	}
	a := &ApplyScore{
		projection: p, mirror: m, logger: logger,
		boards: map[string]configs.Board{}, queue: make(chan pendingEvent, cfg.MaxBatch), maxBatch: cfg.MaxBatch,
		metrics: applyMetrics{
			batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
				Name: "leaderboard_projector_batch_size", Help: "Events per projector batch.",
				Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
			stepTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Name: "leaderboard_projector_step_seconds", Help: "Time of each projector batch step (postgres, redis).",
				Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)}, []string{"step"}),
			applied: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "leaderboard_projector_events_total", Help: "Events the projector handled, by result (applied, redelivered, failed)."},
				[]string{"result"}),
			lag: prometheus.NewHistogram(prometheus.HistogramOpts{
				Name: "leaderboard_projection_lag_seconds", Help: "Time from accept to applied in Redis.",
				Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}),
		},
	}
	for _, b := range cfg.Boards {
		a.boards[b.ID] = b
	}
	if changes != nil {
		a.changes = newChangePublisher(changes, cfg.ChangesTopic, cfg.UsersTopic, logger)
	}
	if reg != nil {
		reg.MustRegister(a.metrics.batchSize, a.metrics.stepTime, a.metrics.applied, a.metrics.lag)
	}
	for range cfg.Workers {
		a.wg.Add(1)
		go a.work()
	}
	return a
}

// Close stops the batch workers after the queued events are done. Call it after the
// router that feeds Handle has stopped.
func (a *ApplyScore) Close() {
	a.closeOnce.Do(func() { close(a.queue) })
	a.wg.Wait()
	if a.changes != nil {
		a.changes.close()
	}
}

// Handle is the watermill handler function.
func (a *ApplyScore) Handle(msg *message.Message) error {
	event, err := a.decode(msg.Payload)
	if err != nil {
		return Permanent(err)
	}
	p := pendingEvent{event: event, done: make(chan error, 1)}
	select {
	case a.queue <- p:
	case <-msg.Context().Done():
		return msg.Context().Err()
	}
	select {
	case err := <-p.done:
		return err
	case <-msg.Context().Done():
		return msg.Context().Err()
	}
}

func (a *ApplyScore) decode(payload []byte) (storage.ScoreEvent, error) {
	var cmd messages.ScoreSubmitted
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cmd); err != nil {
		return storage.ScoreEvent{}, fmt.Errorf("decode ScoreSubmitted: %w", err)
	}
	if err := cmd.Validate(); err != nil {
		return storage.ScoreEvent{}, fmt.Errorf("invalid ScoreSubmitted: %w", err)
	}
	b, ok := a.boards[cmd.Board]
	if !ok {
		return storage.ScoreEvent{}, fmt.Errorf("unknown board %q", cmd.Board)
	}
	if !b.ValidPeriod(cmd.Period) {
		return storage.ScoreEvent{}, fmt.Errorf("invalid period %q for board %s", cmd.Period, b.ID)
	}
	if cmd.Value < b.MinValue || cmd.Value > b.MaxValue {
		return storage.ScoreEvent{}, fmt.Errorf("value %d outside [%d, %d] of board %s", cmd.Value, b.MinValue, b.MaxValue, b.ID)
	}
	return storage.ScoreEvent{
		EventID: cmd.EventID, Board: cmd.Board, Period: cmd.Period, Operator: b.Operator,
		UserID: cmd.UserID, NickName: cmd.NickName, Value: cmd.Value, OccurredAt: cmd.OccurredAt,
	}, nil
}

func (a *ApplyScore) work() {
	defer a.wg.Done()
	batch := make([]pendingEvent, 0, a.maxBatch)
	for first := range a.queue {
		batch = append(batch[:0], first)
	drain:
		for len(batch) < a.maxBatch {
			select {
			case p, ok := <-a.queue:
				if !ok {
					break drain
				}
				batch = append(batch, p)
			default:
				break drain
			}
		}
		a.settle(batch)
	}
}

// settle applies a batch and answers each event's handler call. A batch that fails for
// any reason but an unreachable store is split: each event is applied on its own, so one
// event PostgreSQL rejects (or one that panics) fails alone and the others apply.
func (a *ApplyScore) settle(batch []pendingEvent) {
	fresh, err := a.safeApply(batch)
	if err != nil && len(batch) > 1 && !errors.Is(err, storage.ErrUnavailable) {
		a.logger.Warn("projector batch failed, applying its events one by one", "events", len(batch), "err", err)
		for _, p := range batch {
			a.settle([]pendingEvent{p})
		}
		return
	}
	if err != nil {
		a.metrics.applied.WithLabelValues("failed").Add(float64(len(batch)))
		if errors.Is(err, storage.ErrRejected) {
			err = Permanent(err)
		}
	} else {
		a.metrics.applied.WithLabelValues("applied").Add(float64(fresh))
		a.metrics.applied.WithLabelValues("redelivered").Add(float64(len(batch) - fresh))
	}
	for _, p := range batch {
		p.done <- err
	}
}

// safeApply runs apply, turning a panic into the error the router's Recoverer would give
// (the poison queue takes it).
func (a *ApplyScore) safeApply(batch []pendingEvent) (fresh int, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = middleware.RecoveredPanicError{V: v, Stacktrace: string(debug.Stack())}
		}
	}()
	return a.apply(batch)
}

// apply runs one batch: PostgreSQL first (the source of truth), then the Redis mirror
// of every entry the batch names, then change notifications. It returns how many events
// were applied for the first time.
func (a *ApplyScore) apply(batch []pendingEvent) (int, error) {
	a.metrics.batchSize.Observe(float64(len(batch)))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	events := make([]storage.ScoreEvent, len(batch))
	for i, p := range batch {
		events[i] = p.event
	}
	start := time.Now()
	applied, err := a.projection.Apply(ctx, events)
	if err != nil {
		return 0, err
	}
	a.metrics.stepTime.WithLabelValues("postgres").Observe(time.Since(start).Seconds())
	type boardKey struct{ board, period string }
	groups := map[boardKey][]storage.EntryState{}
	var order []boardKey
	for _, s := range applied.Entries {
		k := boardKey{s.Board, s.Period}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], s)
	}
	for _, k := range order {
		start = time.Now()
		top, changed, err := a.mirror.Apply(ctx, k.board, k.period, groups[k], applied.NickNames, applied.MaxSeq)
		if err != nil {
			return 0, err
		}
		a.metrics.stepTime.WithLabelValues("redis").Observe(time.Since(start).Seconds())
		if a.changes != nil {
			if changed {
				a.changes.offer(k.board, k.period, top)
			}
			a.changes.offerUsers(k.board, k.period, applied.Changed[k.board+":"+k.period])
		}
	}
	now := time.Now()
	for i, e := range events {
		if applied.Fresh[i] { // a redelivery's age is not projection lag
			a.metrics.lag.Observe(now.Sub(e.OccurredAt).Seconds())
		}
	}
	return applied.NewEvents, nil
}
