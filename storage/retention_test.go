package storage_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestRetention: one pass deletes event ids and history rows older than their retention
// (by the injected clock), and all but the newest anomalies; nothing younger.
func TestRetention(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	ctx := testContext(t)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `
		INSERT INTO score_requests (event_id, body_hash, user_id, board_id, accepted_at)
		SELECT 'e' || i, '\x00', 'u', 'global', $1::timestamptz - i * interval '1 hour' FROM generate_series(1, 30) i`, now); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO score_history (event_id, board_id, period, operator, user_id, value, occurred_at, applied_at)
		SELECT 'e' || i, 'global', 'all_time', 'best', 'u', i, $1, $1::timestamptz - i * interval '1 hour' FROM generate_series(1, 60) i`, now); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO anomalies (at, reason, user_id, board_id, event_id, detail)
		SELECT $1, 'rate_limited', 'u' || i, 'global', '', '' FROM generate_series(1, 150) i`, now); err != nil {
		t.Fatal(err)
	}
	r := storage.NewRetention(pool, storage.RetentionConfig{EventIDs: 24 * time.Hour, History: 48 * time.Hour, Anomalies: 100,
		Interval: time.Hour, Now: func() time.Time { return now }}, slog.New(slog.DiscardHandler))
	p, err := r.Prune(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.EventIDs != 6 || p.History != 12 || p.Anomalies != 50 {
		t.Fatalf("pruned %+v, want 6 event ids (25–30 h old), 12 history rows (49–60 h), 50 anomalies", p)
	}
	var requests, history, anomalies int
	var oldest string
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM score_requests), (SELECT count(*) FROM score_history),
		(SELECT count(*) FROM anomalies), (SELECT min(user_id) FROM anomalies)`).Scan(&requests, &history, &anomalies, &oldest); err != nil {
		t.Fatal(err)
	}
	if requests != 24 || history != 48 || anomalies != 100 || oldest != "u100" {
		t.Fatalf("kept %d event ids, %d history rows, %d anomalies from %s; want 24, 48, 100 from the 51st", requests, history, anomalies, oldest)
	}
}

// TestRetentionKeepsTheHistoryOfDeadLetters: a dead letter may hold a command that was
// applied (a duplicate delivery's letter, or one whose Redis step failed after the commit)
// and be requeued at any age; only the history tells the projector it was applied. So the
// history of a command a dead letter holds stays past its retention, until the letter
// is gone, and once requeued for the history's retention again (a requeue of it after the
// prune applied an increment twice).
func TestRetentionKeepsTheHistoryOfDeadLetters(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	ctx := testContext(t)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `
		INSERT INTO score_history (event_id, board_id, period, operator, user_id, value, occurred_at, applied_at)
		SELECT 'e' || i, 'points', 'all_time', 'incr', u, 10, $1, $1::timestamptz - interval '100 days'
		FROM generate_series(1, 2) i, unnest(ARRAY['dup', 'other']) u`, now); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO dead_letters (uuid, event_id, user_id, payload, reason, topic, handler, subscriber)
		VALUES ('e1', 'e1', 'dup', '{}', 'panic', 'leaderboard.score-events', 'apply-score', 'kafka')`); err != nil {
		t.Fatal(err)
	}
	r := storage.NewRetention(pool, storage.RetentionConfig{EventIDs: 7 * 24 * time.Hour, History: 90 * 24 * time.Hour, Anomalies: 100,
		Interval: time.Hour, Now: func() time.Time { return now }}, slog.New(slog.DiscardHandler))
	history := func() string {
		var left string
		if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(user_id || '/' || event_id, ' ' ORDER BY user_id, event_id), '') FROM score_history`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left
	}
	if p, err := r.Prune(ctx); err != nil || p.History != 3 || history() != "dup/e1" {
		t.Fatalf("pruned %+v (%v), history left %q; want 3 pruned and dup's e1 (its dead letter waits) kept", p, err, history())
	}
	// Requeued, the command may wait in the outbox or the broker: its history stays for
	// the history's retention again (the requeue deleted the letter).
	var id int64
	if err := pool.QueryRow(ctx, `SELECT id FROM dead_letters`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := storage.NewDeadLetterAdmin(stdlib.OpenDBFromPool(pool), storage.NewOutboxSchema(), 1).Requeue(ctx, id, "ops"); err != nil {
		t.Fatal(err)
	}
	if p, err := r.Prune(ctx); err != nil || p.History != 0 || history() != "dup/e1" {
		t.Fatalf("after the requeue: pruned %+v (%v), history left %q; want dup's e1 kept", p, err, history())
	}
	r = storage.NewRetention(pool, storage.RetentionConfig{EventIDs: 7 * 24 * time.Hour, History: 90 * 24 * time.Hour, Anomalies: 100,
		Interval: time.Hour, Now: func() time.Time { return time.Now().Add(91 * 24 * time.Hour) }}, slog.New(slog.DiscardHandler))
	if _, err := pool.Exec(ctx, `UPDATE requeued_events SET requeued_at = now() - interval '91 days'`); err != nil {
		t.Fatal(err)
	}
	if p, err := r.Prune(ctx); err != nil || p.History != 1 || history() != "" {
		t.Fatalf("a history's retention after the requeue: pruned %+v (%v), history left %q; want dup's e1 gone", p, err, history())
	}
}

// TestRetryAfterRetentionIsNotAppliedTwiceWithEqualRetentions: the configuration
// accepts LEADERBOARD_HISTORY_RETENTION equal to LEADERBOARD_EVENT_ID_RETENTION ("never
// shorter than the event ids"). A command is
// accepted (score_requests.accepted_at) and applied tens of milliseconds later
// (score_history.applied_at): both rows pass their cutoff by the time the next retention
// pass runs, and that one pass deletes both. A client retry arriving right after is then
// accepted again (the request log no longer knows it) and the projector finds no history
// row: the increment is applied a second time. The history must outlive the event id it
// guards (README: a retry after the retention "changes nothing (the projector finds it
// applied)"), so the history is kept HistoryMargin past the event ids.
func TestRetryAfterRetentionIsNotAppliedTwiceWithEqualRetentions(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	ctx := testContext(t)
	p := storage.NewProjection(pool)
	requests := storage.NewRequestLog(pool)

	// The command, accepted and applied 24 h 5 min ago (applied 20 ms after acceptance).
	if _, err := pool.Exec(ctx, `INSERT INTO score_requests (event_id, body_hash, user_id, board_id, accepted_at)
		VALUES ('quest-7', '\x01', 'alice', 'points', now() - interval '24 hours 5 minutes')`); err != nil {
		t.Fatal(err)
	}
	first := incrEvent("quest-7", "alice", 5, time.Now().Add(-24*time.Hour-5*time.Minute))
	mustApply(t, p, first)
	if _, err := pool.Exec(ctx, `UPDATE score_history SET applied_at = now() - interval '24 hours 5 minutes' + interval '20 milliseconds'
		WHERE user_id = 'alice' AND event_id = 'quest-7'`); err != nil {
		t.Fatal(err)
	}

	// One retention pass with the two retentions equal (as configs.Load accepts).
	r := storage.NewRetention(pool, storage.RetentionConfig{EventIDs: 24 * time.Hour, History: 24 * time.Hour, Anomalies: 100,
		Interval: 10 * time.Minute}, slog.New(slog.DiscardHandler))
	if _, err := r.Prune(ctx); err != nil {
		t.Fatal(err)
	}

	// The client retries now: the request log no longer knows the event id, so the API
	// accepts it again and the projector gets it.
	if _, err := requests.Check(ctx, "alice", "quest-7", []byte{1}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("request log after the pass: %v, want the event id gone (past its retention)", err)
	}
	retry := incrEvent("quest-7", "alice", 5, time.Now())
	got := mustApply(t, p, retry)
	if got.NewEvents != 0 {
		s := entryOf(t, got, "points", "alice")
		t.Errorf("a retry after the event id's retention was applied again: points = %d, want 5 (one pass pruned the request log's row and the history's row of the same event, with EventIDs = History = 24h)", s.Score)
	}
}

// TestAnomaliesPruneInBatches: a flood of refused writes past several delete batches is
// pruned down to the newest keep, whatever their number: the batches go on until none is
// left (it checks the result, which one DELETE would give too, not the batching).
func TestAnomaliesPruneInBatches(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	ctx := testContext(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO anomalies (at, reason, user_id, board_id, event_id, detail)
		SELECT now(), 'rate_limited', 'u' || lpad(i::text, 5, '0'), 'global', '', '' FROM generate_series(1, 12100) i`); err != nil {
		t.Fatal(err)
	}
	n, err := storage.NewAnomalies(pool).Prune(ctx, 100)
	if err != nil || n != 12000 {
		t.Fatalf("Prune = %d, %v; want 12000 deleted", n, err)
	}
	var left int
	var oldest string
	if err := pool.QueryRow(ctx, `SELECT count(*), min(user_id) FROM anomalies`).Scan(&left, &oldest); err != nil {
		t.Fatal(err)
	}
	if left != 100 || oldest != "u12001" {
		t.Fatalf("kept %d anomalies from %s, want the newest 100 from u12001", left, oldest)
	}
	if n, err := storage.NewAnomalies(pool).Prune(ctx, 100); err != nil || n != 0 {
		t.Fatalf("a second Prune = %d, %v; want nothing to delete", n, err)
	}
}
