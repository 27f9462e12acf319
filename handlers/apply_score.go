package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// ScoreProjection applies events to PostgreSQL, idempotently by (user, event id); fold
// decides what the new events do to their entries.
type ScoreProjection interface {
	Apply(ctx context.Context, events []storage.ScoreEvent, fold storage.FoldFunc) (storage.AppliedBatch, error)
}

// BoardMirror mirrors absolute entry states into Redis and keeps the cached top-N. Apply
// answers storage.ErrNotLoaded for a period Redis does not hold; Reload loads it from
// PostgreSQL.
type BoardMirror interface {
	Apply(ctx context.Context, t storage.Target, states []storage.EntryState, nicks map[string]string, minVersion int64) (storage.Top, bool, error)
	Reload(ctx context.Context, t storage.Target) (storage.Top, error)
}

// ChangeNotifier hears what a batch changed: a board's new top, and whose entries moved.
type ChangeNotifier interface {
	TopChanged(board, period string, top storage.Top)
	UsersChanged(board, period string, users []string)
}

// ApplyScore is the projector: it applies ScoreSubmitted commands to PostgreSQL, then
// Redis, and tells the change notifier what changed.
//
// Handle is called concurrently, once per Kafka partition; calls are gathered into
// batches so one PostgreSQL transaction and one Redis script per board serve many events.
type ApplyScore struct {
	projection ScoreProjection
	mirror     BoardMirror
	changes    ChangeNotifier
	cfg        configs.Config
	now        func() time.Time
	metrics    *ProjectorMetrics
	logger     *slog.Logger
	fold       storage.FoldFunc
	batcher    *storage.Batcher[storage.ScoreEvent, bool]
}

// ApplyScoreConfig configures ApplyScore.
type ApplyScoreConfig struct {
	// Config gives the boards and how long Redis keeps their periods.
	Config configs.Config
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Workers is how many batches may be in flight at once (default 2).
	Workers int
	// MaxBatch bounds the events of one batch (default 500).
	MaxBatch int
}

// NewApplyScore starts the batch workers; Close stops them. changes may be nil.
func NewApplyScore(p ScoreProjection, m BoardMirror, changes ChangeNotifier, cfg ApplyScoreConfig, metrics *ProjectorMetrics, logger *slog.Logger) *ApplyScore {
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 500
	}
	if metrics == nil {
		metrics = NewProjectorMetrics(nil)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &ApplyScore{projection: p, mirror: m, changes: changes, cfg: cfg.Config, now: cfg.Now, metrics: metrics, logger: logger}
	a.fold = FoldWith(cfg.Config.Board)
	a.batcher = storage.NewBatcher(cfg.Workers, cfg.MaxBatch, a.settle)
	return a
}

// Close stops the batch workers after the queued events are done. Call it after the
// router that feeds Handle has stopped.
func (a *ApplyScore) Close() { a.batcher.Close() }

// Handle is the watermill handler function.
func (a *ApplyScore) Handle(msg *message.Message) error {
	event, err := a.decode(msg.Payload)
	if err != nil {
		return Permanent(err)
	}
	_, err = a.batcher.Do(msg.Context(), event)
	return err
}

// decode reads a ScoreSubmitted and checks every field against the board it names.
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
	b, ok := a.cfg.Board(cmd.Board)
	if !ok {
		return storage.ScoreEvent{}, fmt.Errorf("unknown board %q", cmd.Board)
	}
	if !b.ValidPeriod(cmd.Period) {
		return storage.ScoreEvent{}, fmt.Errorf("invalid period %q for board %s", cmd.Period, b.ID)
	}
	if !b.InBounds(cmd.Value) {
		return storage.ScoreEvent{}, fmt.Errorf("value %d out of the bounds of board %s", cmd.Value, b.ID)
	}
	return storage.ScoreEvent{
		EventID: cmd.EventID, Board: cmd.Board, Period: cmd.Period, Operator: b.Operator,
		UserID: cmd.UserID, NickName: cmd.NickName, Value: cmd.Value, OccurredAt: cmd.OccurredAt, Metadata: cmd.Metadata,
	}, nil
}

// settle applies a batch and returns each event's result. A batch that fails for any
// reason but an unreachable store is split: each event is applied on its own, so one
// event PostgreSQL rejects (or one that panics) fails alone and the others apply.
func (a *ApplyScore) settle(events []storage.ScoreEvent) []storage.Result[bool] {
	results := make([]storage.Result[bool], len(events))
	fresh, err := a.safeApply(events)
	if err != nil && len(events) > 1 && !errors.Is(err, storage.ErrUnavailable) {
		a.logger.Warn("projector batch failed, applying its events one by one", "events", len(events), "err", err)
		for i := range events {
			results[i] = a.settle(events[i : i+1])[0]
		}
		return results
	}
	if err != nil && errors.Is(err, storage.ErrRejected) {
		err = Permanent(err)
	}
	for i, e := range events {
		result := "failed"
		switch {
		case err != nil:
		case fresh[i]:
			result = "applied"
		default:
			result = "redelivered"
		}
		a.metrics.events.WithLabelValues(boardLabel(e.Board), result).Inc()
		results[i].Err = err
	}
	return results
}

// boardLabel is a board's metric label: its definition's id (every match board is "match").
func boardLabel(board string) string {
	def, _, _ := strings.Cut(board, ":")
	return def
}

// safeApply runs apply, turning a panic into the error the router's Recoverer would give
// (the poison queue takes it).
func (a *ApplyScore) safeApply(events []storage.ScoreEvent) (fresh []bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = middleware.RecoveredPanicError{V: v, Stacktrace: string(debug.Stack())}
		}
	}()
	return a.apply(events)
}

// apply runs one batch: PostgreSQL first (the source of truth), then the Redis mirror
// of every entry the batch names, then change notifications. It returns which events were
// applied for the first time.
func (a *ApplyScore) apply(events []storage.ScoreEvent) ([]bool, error) {
	a.metrics.batchSize.Observe(float64(len(events)))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	applied, err := a.projection.Apply(ctx, events, a.fold)
	if err != nil {
		return nil, err
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
		b, _ := a.cfg.Board(k.board)
		ttl, keep := a.cfg.RedisLife(b, k.period, a.now())
		if !keep { // a period Redis no longer keeps: PostgreSQL has it, reads go there
			continue
		}
		t := storage.Target{Board: k.board, Period: k.period, TTL: ttl}
		top, changed, err := a.mirror.Apply(ctx, t, groups[k], applied.NickNames, applied.MaxSeq)
		if errors.Is(err, storage.ErrNotLoaded) { // PostgreSQL has the batch: load the whole period from it
			top, err = a.mirror.Reload(ctx, t)
			changed = true
		}
		if err != nil {
			return nil, err
		}
		a.metrics.stepTime.WithLabelValues("redis").Observe(time.Since(start).Seconds())
		if a.changes != nil {
			if changed {
				a.changes.TopChanged(k.board, k.period, top)
			}
			a.changes.UsersChanged(k.board, k.period, applied.Changed[k.board+":"+k.period])
		}
	}
	now := time.Now()
	for i, e := range events {
		if applied.Fresh[i] { // a redelivery's age is not projection lag
			a.metrics.lag.Observe(now.Sub(e.OccurredAt).Seconds())
		}
	}
	return applied.Fresh, nil
}

// FoldWith returns the fold of a projection with the rules of the boards board looks up:
// each new event is combined with its entry by its board's operator, in batch order.
func FoldWith(board func(id string) (configs.Board, bool)) storage.FoldFunc {
	return func(current map[storage.EntryKey]storage.EntryState, events []storage.ScoreEvent) ([]storage.EntryState, error) {
		state := map[storage.EntryKey]*storage.EntryState{}
		for k, s := range current {
			state[k] = &s
		}
		var changed []storage.EntryKey
		seen := map[storage.EntryKey]bool{}
		for _, e := range events {
			b, ok := board(e.Board)
			if !ok { // decode checked it; only a caller's bug gets here
				return nil, fmt.Errorf("fold: unknown board %q: %w", e.Board, storage.ErrRejected)
			}
			k := e.Key()
			var cur *configs.EntryValue
			if s := state[k]; s != nil {
				cur = &configs.EntryValue{Value: s.Score, ReachedAt: s.ReachedAt, UpdatedAt: s.UpdatedAt}
			}
			next, ok := b.Combine(cur, e.Value, e.OccurredAt)
			if !ok {
				continue
			}
			state[k] = &storage.EntryState{Board: k.Board, Period: k.Period, UserID: k.UserID, Score: next.Value, SortKey: b.SortKey(next.Value),
				ReachedAt: next.ReachedAt, UpdatedAt: next.UpdatedAt, Metadata: e.Metadata}
			if !seen[k] {
				seen[k] = true
				changed = append(changed, k)
			}
		}
		out := make([]storage.EntryState, len(changed))
		for i, k := range changed {
			out[i] = *state[k]
		}
		return out, nil
	}
}
