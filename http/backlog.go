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
type Backlog struct {
	count    func(ctx context.Context, upTo int64) (int64, error)
	max      int64
	interval time.Duration
	logger   *slog.Logger
	n        atomic.Int64
}

// NewBacklog returns the backlog watch (max 0: never full).
func NewBacklog(count func(ctx context.Context, upTo int64) (int64, error), max int64, interval time.Duration, reg prometheus.Registerer, logger *slog.Logger) *Backlog {
	b := &Backlog{count: count, max: max, interval: interval, logger: logger}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leaderboard_pipeline_backlog",
		Help: "Accepted commands not yet applied, as the API last counted them (up to LEADERBOARD_MAX_BACKLOG+1 per outbox shard).",
	}, func() float64 { return float64(b.n.Load()) }))
	return b
}

// Full reports whether writes must wait.
func (b *Backlog) Full() bool { return b != nil && b.max > 0 && b.n.Load() > b.max }

// Run counts every interval until ctx ends; a failed count keeps the last one.
func (b *Backlog) Run(ctx context.Context) error {
	if b.max <= 0 {
		return nil
	}
	t := time.NewTicker(b.interval)
	defer t.Stop()
	for {
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
		case <-t.C:
		}
	}
}
