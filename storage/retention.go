package storage

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Retention deletes what the service keeps for a while only: accepted event ids (the
// request log that answers retries) older than EventIDs, history rows older than History,
// and all but the newest Anomalies refused writes. It deletes in small batches, so
// pruning never holds long locks.
type Retention struct {
	pool      *pgxpool.Pool
	anomalies *Anomalies
	cfg       RetentionConfig
	logger    *slog.Logger
}

// RetentionConfig says how long each kind of record is kept.
type RetentionConfig struct {
	EventIDs  time.Duration
	History   time.Duration
	Anomalies int
	Interval  time.Duration
	// Now is the process's clock (time.Now when nil). A row goes once it is older than its
	// retention by this clock and by PostgreSQL's, which stamped it: a relay whose clock
	// runs ahead never takes event ids out of their window early.
	Now func() time.Time
}

// NewRetention returns the pruner.
func NewRetention(pool *pgxpool.Pool, cfg RetentionConfig, logger *slog.Logger) *Retention {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Retention{pool: pool, anomalies: NewAnomalies(pool), cfg: cfg, logger: logger}
}

// Pruned counts what one pass deleted.
type Pruned struct {
	EventIDs, History, Anomalies int64
}

// pruneBatch bounds the rows of one DELETE.
const pruneBatch = 5000

// Prune runs one pass.
func (r *Retention) Prune(ctx context.Context) (Pruned, error) {
	var p Pruned
	var err error
	now := r.cfg.Now()
	if p.EventIDs, err = r.deleteOlder(ctx, `score_requests`, `accepted_at`, ``, now, r.cfg.EventIDs); err != nil {
		return p, err
	}
	// The history is what keeps an event from being applied twice: a dead letter of an
	// applied command (a duplicate delivery's, or one whose Redis step failed after the
	// commit) may be requeued at any age, so the history of a command a dead letter holds
	// stays until the letter is deleted, and once requeued, for the history's retention
	// again (the requeued command may wait in the outbox or the broker meanwhile).
	if _, err = r.deleteOlder(ctx, `requeued_events`, `requeued_at`, ``, now, r.historyAge()); err != nil {
		return p, err
	}
	if p.History, err = r.deleteOlder(ctx, `score_history`, `applied_at`,
		`NOT EXISTS (SELECT 1 FROM dead_letters l WHERE l.user_id = t.user_id AND l.event_id = t.event_id)
		 AND NOT EXISTS (SELECT 1 FROM requeued_events q WHERE q.user_id = t.user_id AND q.event_id = t.event_id)`, now, r.historyAge()); err != nil {
		return p, err
	}
	p.Anomalies, err = r.anomalies.Prune(ctx, r.cfg.Anomalies)
	return p, err
}

// HistoryMargin is how much longer than its event id an applied event stays in the
// history at least. An event is applied moments after its event id was accepted, so with
// equal retentions one pass would drop both, and a retry that came right after would be
// accepted again and find no history: applied twice. With the margin, a retry accepted
// after its event id's retention is still found applied as long as the pipeline applies
// it within a day.
const HistoryMargin = 24 * time.Hour

// historyAge is the history's retention, at least HistoryMargin past the event ids'.
func (r *Retention) historyAge() time.Duration {
	return max(r.cfg.History, r.cfg.EventIDs+HistoryMargin)
}

// deleteOlder deletes the rows of table whose column is more than age before now and
// before PostgreSQL's now(), and that meet cond (if any; the row is t), a batch at a time.
func (r *Retention) deleteOlder(ctx context.Context, table, column, cond string, now time.Time, age time.Duration) (int64, error) {
	if cond != "" {
		cond = ` AND ` + cond
	}
	var total int64
	for {
		tag, err := r.pool.Exec(ctx, `DELETE FROM `+table+` WHERE ctid IN (SELECT ctid FROM `+table+` t WHERE t.`+column+
			` < least($1::timestamptz, now()) - $3::bigint * interval '1 microsecond'`+cond+` LIMIT $2)`, now, pruneBatch, age.Microseconds())
		if err != nil {
			return total, unavailable("prune "+table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch || ctx.Err() != nil {
			return total, nil
		}
	}
}

// Run prunes every Interval until ctx ends.
func (r *Retention) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		p, err := r.Prune(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			r.logger.Warn("retention pass failed", "err", err)
		case p.EventIDs+p.History+p.Anomalies > 0:
			r.logger.Info("retention pass", "event_ids", p.EventIDs, "history", p.History, "anomalies", p.Anomalies)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
