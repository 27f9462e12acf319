package handlers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
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
	ApplyAll(ctx context.Context, groups []storage.MirrorGroup, nicks map[string]string) []storage.MirrorResult
	Reload(ctx context.Context, t storage.Target) (storage.Top, error)
	// CurrentTop reads a board period's whole top (to tell it again after a redelivery).
	CurrentTop(ctx context.Context, t storage.Target) (storage.Top, error)
	// Unhold releases the hold an admin's adjustment or removal put on its entry
	// (storage.Boards.Hold) once Redis shows the command applied.
	Unhold(ctx context.Context, board, period, userID, eventID string) error
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
	// batcher gathers messages' payloads: each decodes to the events of one command (one
	// per board it counts for), applied together or not at all. The batch workers decode
	// them, not the goroutine Watermill starts for each message: decoding JSON grows a
	// fresh goroutine's stack every time, a worker's only once (at saturation, 5-10 % less
	// service CPU per event).
	batcher *storage.Batcher[forwarded, bool]
}

// forwarded is a message's payload and the outbox row the relay forwarded it from (zero
// when its metadata names none).
type forwarded struct {
	payload []byte
	row     storage.OutboxRow
	// requeued: the message is a dead letter an admin requeued (storage.MetaAttempts).
	requeued bool
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
	// Linger is the longest a batch waits for more messages after its first (0: it takes
	// what is queued). The wait follows the load (storage.NewAdaptiveBatcher): the whole
	// Linger once, at the rate messages came lately, it gathers half a batch, less below,
	// so a lone score is applied at once and a busy projector makes fewer, larger
	// transactions and Redis calls.
	Linger time.Duration
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
	a.batcher = storage.NewAdaptiveBatcher(cfg.Workers, cfg.MaxBatch, cfg.Linger, a.settle)
	return a
}

// Close stops the batch workers after the queued events are done. Call it after the
// router that feeds Handle has stopped.
func (a *ApplyScore) Close() { a.batcher.Close() }

// Handle is the watermill handler function.
func (a *ApplyScore) Handle(msg *message.Message) error {
	row, _ := storage.ParseOutboxRow(msg.Metadata.Get(messages.MetaOutboxRow))
	_, err := a.batcher.Do(msg.Context(), forwarded{payload: msg.Payload, row: row, requeued: msg.Metadata.Get(storage.MetaAttempts) != ""})
	return err
}

// decode reads a ScoreSubmitted and checks every field against the boards it names; it
// returns one event per board the command counts for.
func (a *ApplyScore) decode(payload []byte) ([]storage.ScoreEvent, error) {
	cmd, err := messages.DecodeScoreSubmitted(payload)
	if err != nil {
		return nil, err
	}
	if err := cmd.Validate(); err != nil {
		return nil, fmt.Errorf("invalid ScoreSubmitted: %w", err)
	}
	if cmd.Op == messages.OpSync {
		return []storage.ScoreEvent{{Op: storage.OpSync, EventID: cmd.EventID, UserID: cmd.UserID, OccurredAt: cmd.OccurredAt}}, nil
	}
	targets := append([]messages.BoardValue{{Board: cmd.Board, Period: cmd.Period, Value: cmd.Value}}, cmd.Also...)
	events := make([]storage.ScoreEvent, len(targets))
	for i, t := range targets {
		b, ok := a.cfg.Board(t.Board)
		if !ok {
			return nil, fmt.Errorf("unknown board %q", t.Board)
		}
		if !b.ValidPeriod(t.Period) {
			return nil, fmt.Errorf("invalid period %q for board %s", t.Period, t.Board)
		}
		op, operator := "", b.Operator // the history records the op, or the board's operator
		switch cmd.Op {
		case messages.OpAdjust:
			if !b.ValueInBounds(t.Value) {
				return nil, fmt.Errorf("adjusted value %d out of the bounds of board %s", t.Value, t.Board)
			}
			op, operator = storage.OpAdjust, storage.OpAdjust
		case messages.OpRemove:
			op, operator = storage.OpRemove, storage.OpRemove
		default:
			if !b.InBounds(t.Value) {
				return nil, fmt.Errorf("value %d out of the bounds of board %s", t.Value, t.Board)
			}
		}
		events[i] = storage.ScoreEvent{
			Op: op, EventID: cmd.EventID, Board: t.Board, Period: t.Period, Operator: operator,
			UserID: cmd.UserID, NickName: cmd.NickName, Value: t.Value, OccurredAt: cmd.OccurredAt, Metadata: cmd.Metadata,
		}
	}
	return events, nil
}

// settle decodes a batch of messages' payloads and applies the commands that decode; a
// payload that does not fails alone, permanently, before any store is touched.
func (a *ApplyScore) settle(msgs []forwarded) []storage.Result[bool] {
	results := make([]storage.Result[bool], len(msgs))
	cmds := make([][]storage.ScoreEvent, 0, len(msgs))
	of := make([]int, 0, len(msgs)) // cmds[j] is msgs[of[j]]
	for i, m := range msgs {
		events, err := a.decode(m.payload)
		if err != nil {
			results[i].Err = Permanent(err)
			continue
		}
		for j := range events {
			events[j].Outbox, events[j].Requeued = m.row, m.requeued
		}
		cmds = append(cmds, events)
		of = append(of, i)
	}
	if len(cmds) > 0 {
		for j, r := range a.settleCommands(cmds) {
			results[of[j]] = r
		}
	}
	return results
}

// settleCommands applies a batch of commands and returns each one's result. A batch that
// fails for any reason but an unreachable store is split: each command is applied on its
// own, so one command PostgreSQL rejects (or one that panics) fails alone and the others
// apply.
func (a *ApplyScore) settleCommands(cmds [][]storage.ScoreEvent) []storage.Result[bool] {
	results := make([]storage.Result[bool], len(cmds))
	var events []storage.ScoreEvent
	for _, c := range cmds {
		events = append(events, c...)
	}
	fresh, err := a.safeApply(events)
	if err != nil && len(cmds) > 1 && !errors.Is(err, storage.ErrUnavailable) {
		a.logger.Warn("projector batch failed, applying its commands one by one", "commands", len(cmds), "err", err)
		for i := range cmds {
			results[i] = a.settleCommands(cmds[i : i+1])[0]
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
	}
	for i := range results {
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
	if err := a.mirrorBatch(ctx, events, applied); err != nil {
		return nil, err
	}
	// Redis shows the batch: the entries admins' commands held are released (a failure
	// leaves a hold to expire, which only sends that user's writes through the pipeline).
	for _, e := range events {
		if e.Op == storage.OpAdjust || e.Op == storage.OpRemove {
			if err := a.mirror.Unhold(ctx, e.Board, e.Period, e.UserID, e.EventID); err != nil {
				a.logger.Warn("release the hold of an admin's command", "err", err, "board", e.Board, "user_id", e.UserID, "event_id", e.EventID)
			}
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

// mirrorBatch mirrors every entry a batch left into Redis, one group per board period
// Redis keeps, then tells the change notifier what changed.
func (a *ApplyScore) mirrorBatch(ctx context.Context, events []storage.ScoreEvent, applied storage.AppliedBatch) error {
	// One group per board period Redis keeps, in the order first named; their scripts go
	// to Redis in pipelines (storage.Boards.ApplyAll).
	type boardKey struct{ board, period string }
	at := map[boardKey]int{}
	var groups []storage.MirrorGroup
	for _, s := range applied.Entries {
		k := boardKey{s.Board, s.Period}
		i, ok := at[k]
		if !ok {
			b, _ := a.cfg.Board(k.board)
			ttl, keep := a.cfg.RedisLife(b, k.period, a.now())
			if !keep { // a period Redis no longer keeps: PostgreSQL has it, reads go there
				at[k] = -1
				continue
			}
			i = len(groups)
			at[k] = i
			groups = append(groups, storage.MirrorGroup{Target: storage.Target{Board: k.board, Period: k.period, TTL: ttl}})
		}
		if i >= 0 {
			groups[i].States = append(groups[i].States, s)
		}
	}
	if len(groups) == 0 {
		return nil
	}
	// A board period with a redelivered event may have been mirrored by an attempt that
	// failed after it, or whose answer was lost: Redis then finds nothing new, and its top
	// and changed users are told again (the streams ignore a version they have).
	redelivered := map[boardKey][]string{}
	for i, e := range events {
		if !applied.Fresh[i] {
			k := boardKey{e.Board, e.Period}
			redelivered[k] = append(redelivered[k], e.UserID)
		}
	}
	start := time.Now()
	results := a.mirror.ApplyAll(ctx, groups, applied.NickNames)
	a.reloadAll(ctx, groups, results)
	var failed error
	for i, g := range groups {
		r, t := results[i], g.Target
		again := redelivered[boardKey{t.Board, t.Period}]
		switch {
		case r.Err == nil && !r.Changed && len(again) > 0:
			if top, err := a.mirror.CurrentTop(ctx, t); err == nil {
				r.Top, r.Changed = top, true
			}
		}
		if r.Err != nil {
			failed = cmp.Or(failed, r.Err)
			continue
		}
		// Every group Redis took is told, even when another failed.
		if a.changes != nil {
			if r.Changed {
				a.changes.TopChanged(t.Board, t.Period, r.Top)
			}
			a.changes.UsersChanged(t.Board, t.Period, slices.Concat(applied.Changed[t.Board+":"+t.Period], again))
		}
	}
	if failed != nil {
		return failed
	}
	a.metrics.stepTime.WithLabelValues("redis").Observe(time.Since(start).Seconds())
	return nil
}

// reloads bounds the board periods one batch loads from PostgreSQL at once.
const reloads = 8

// reloadAll loads the board periods Redis did not hold (ErrNotLoaded) from PostgreSQL,
// which has the batch, up to reloads at a time: a batch of the match workload names many
// new matches, and a load is mostly waiting for round trips (one after another they held
// the whole batch, best scores and increments too, back by a second on a slow machine).
// A period named only for a user's new nick name, or for a ban or an unban, is not loaded:
// a later load reads it.
func (a *ApplyScore) reloadAll(ctx context.Context, groups []storage.MirrorGroup, results []storage.MirrorResult) {
	var wg sync.WaitGroup
	var panicked sync.Once
	var recovered any
	slots := make(chan struct{}, reloads)
	for i := range results {
		if !errors.Is(results[i].Err, storage.ErrNotLoaded) {
			continue
		}
		if !slices.ContainsFunc(groups[i].States, func(s storage.EntryState) bool { return !s.NameOnly && !s.SyncOnly }) {
			results[i] = storage.MirrorResult{} // only a new nick name or a sync, which a later load reads anyway
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() {
				<-slots
				if v := recover(); v != nil {
					panicked.Do(func() { recovered = v })
				}
			}()
			top, err := a.mirror.Reload(ctx, groups[i].Target)
			results[i] = storage.MirrorResult{Top: top, Changed: true, Err: err}
		})
	}
	wg.Wait()
	if recovered != nil {
		panic(recovered) // in the batch's goroutine, where safeApply takes it for the poison queue
	}
}

// FoldWith returns the fold of a projection with the rules of the boards board looks up:
// each new event is combined with its entry by its board's operator, in batch order. One
// user's commands reach the projector in the order they were committed to the outbox (the
// order of their partition, one after the other: router.WindowSubscriber), and are applied
// in that order: a write accepted just before an admin's adjustment but committed after it
// is applied after it, in this batch or the next alike: on a set board its value and
// metadata are the entry's, whatever the API's clocks said. Only a dead letter an admin
// requeued comes out of that order: on a set board, one accepted before the entry's last
// change changes nothing.
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
			prev := state[k]
			var cur *configs.EntryValue
			if prev != nil && !prev.Removed {
				cur = &configs.EntryValue{Value: prev.Score, ReachedAt: prev.ReachedAt, UpdatedAt: prev.UpdatedAt}
			}
			var next storage.EntryState
			switch e.Op {
			case storage.OpRemove:
				if cur == nil { // nothing to remove
					continue
				}
				next = *prev
				next.Removed, next.UpdatedAt = true, maxTime(prev.UpdatedAt, e.OccurredAt)
			case storage.OpAdjust: // an admin sets the value, whatever the operator
				next = storage.EntryState{Score: e.Value, ReachedAt: e.OccurredAt, UpdatedAt: e.OccurredAt}
				if cur != nil {
					next.Metadata = prev.Metadata
					next.UpdatedAt = maxTime(cur.UpdatedAt, e.OccurredAt) // accepted before the entry's last change, committed after
				}
			default:
				if b.Operator == configs.OpSet && e.Requeued && cur != nil && e.OccurredAt.Before(cur.UpdatedAt) {
					continue // a requeued dead letter takes no newer value back
				}
				v, ok := b.Combine(cur, e.Value, e.OccurredAt)
				if !ok {
					continue
				}
				next = storage.EntryState{Score: v.Value, ReachedAt: v.ReachedAt, UpdatedAt: v.UpdatedAt, Metadata: e.Metadata}
				if cur != nil && b.Operator == configs.OpIncr && v.UpdatedAt.After(e.OccurredAt) {
					// A newer event changed the entry last (an increment accepted before it,
					// applied after): its metadata stays. A best or set value and its metadata
					// go together.
					next.Metadata = prev.Metadata
				}
			}
			next.Board, next.Period, next.UserID, next.SortKey = k.Board, k.Period, k.UserID, b.SortKey(next.Score)
			state[k] = &next
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

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
