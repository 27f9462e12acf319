package http

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Backlog keeps writes from outrunning the pipeline: it counts the accepted commands not
// yet applied (the outbox) every interval, and Full reports when they exceed max; writes
// are then refused with 503 backlog_full until the pipeline catches up.
//
// A count takes longer as the backlog grows (a large one is a scan of many thousand
// rows), so after a count the next one waits at least countSpacing times as long as it
// took: counting costs at most one part in countSpacing of a connection, also when the
// machine is busiest.
type Backlog struct {
	count    func(ctx context.Context, upTo int64) (int64, error)
	max      int64
	interval time.Duration
	logger   *slog.Logger
	n        atomic.Int64
	now      func() time.Time
	after    func(time.Duration) <-chan time.Time
}

// countSpacing is how many times a count's own duration the next count waits at least.
const countSpacing = 50

// NewBacklog returns the backlog watch (max 0: never full).
func NewBacklog(count func(ctx context.Context, upTo int64) (int64, error), max int64, interval time.Duration, reg prometheus.Registerer, logger *slog.Logger) *Backlog {
	b := &Backlog{count: count, max: max, interval: interval, logger: logger, now: time.Now, after: time.After}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leaderboard_pipeline_backlog",
		Help: "Accepted commands not yet applied, as the API last counted them (up to LEADERBOARD_MAX_BACKLOG+1 per outbox shard).",
	}, func() float64 { return float64(b.n.Load()) }))
	return b
}

// Full reports whether writes must wait.
func (b *Backlog) Full() bool { return b != nil && b.max > 0 && b.n.Load() > b.max }

// Run counts every interval (or countSpacing times a count's duration, when longer)
// until ctx ends; a failed count keeps the last one.
func (b *Backlog) Run(ctx context.Context) error {
	if b.max <= 0 {
		return nil
	}
	for {
		start := b.now()
		cctx, cancel := context.WithTimeout(ctx, max(b.interval, 2*time.Second))
		n, err := b.count(cctx, b.max)
		cancel()
		if err == nil {
			b.n.Store(n)
		} else if ctx.Err() == nil {
			b.logger.Warn("count the pipeline backlog", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-b.after(max(b.interval, countSpacing*b.now().Sub(start))):
		}
	}
}
