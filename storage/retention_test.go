package storage_test

import (
	"log/slog"
	"testing"
	"time"

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
