package storage_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestRetentionKeepsEventIDsOfTheWindowWhenTheRelayClockRunsAhead: an accepted command's
// event id is stamped by PostgreSQL's clock (score_requests.accepted_at DEFAULT now()),
// but the retention's cutoff is the relay process's clock. A relay whose clock runs two
// minutes ahead of PostgreSQL deletes an event id accepted 23 h 59 min ago (by the clock
// that stamped it), inside a 24 h window: the client's retry inside the documented window
// is then accepted again, and a retry with another body is answered 202 instead of
// 409 event_id_conflict. Found by a review; the retention now reads PostgreSQL's clock too.
func TestRetentionKeepsEventIDsOfTheWindowWhenTheRelayClockRunsAhead(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	ctx := testContext(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO score_requests (event_id, body_hash, user_id, board_id, accepted_at)
		VALUES ('in-window', '\x01', 'u', 'global', now() - interval '23 hours 59 minutes')`); err != nil {
		t.Fatal(err)
	}
	relayClock := func() time.Time { return time.Now().Add(2 * time.Minute) } // two minutes ahead
	r := storage.NewRetention(pool, storage.RetentionConfig{EventIDs: 24 * time.Hour, History: 48 * time.Hour, Anomalies: 100,
		Interval: time.Hour, Now: relayClock}, slog.New(slog.DiscardHandler))
	if _, err := r.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM score_requests WHERE event_id = 'in-window'`); n != 1 {
		t.Errorf("an event id accepted 23 h 59 min ago (PostgreSQL's clock) was pruned from a 24 h window by a relay clock 2 min ahead")
	}
}

// TestRetentionKeepsUnchangedEventIDsOfAnAPIWhoseClockLags: an event id answered
// "unchanged" is stamped by the API's clock when PostgreSQL's is earlier only: an API whose
// clock lags a day stamped it a day old, and the next retention pass took it out of its
// window at once (a retry with another body then 202 instead of 409).
func TestRetentionKeepsUnchangedEventIDsOfAnAPIWhoseClockLags(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	ctx := testContext(t)
	lagging := time.Now().Add(-25 * time.Hour)
	if _, _, _, err := storage.NewRequestLog(pool).RecordUnchanged(ctx, "u", "lagging", "global", "all_time", []byte{1}, lagging); err != nil {
		t.Fatal(err)
	}
	r := storage.NewRetention(pool, storage.RetentionConfig{EventIDs: 24 * time.Hour, History: 48 * time.Hour, Anomalies: 100,
		Interval: time.Hour}, slog.New(slog.DiscardHandler))
	if _, err := r.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM score_requests WHERE event_id = 'lagging'`); n != 1 {
		t.Errorf("an event id answered unchanged just now, by an API whose clock lags a day, was pruned from a 24 h window")
	}
}
