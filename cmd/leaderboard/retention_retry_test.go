package main

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestRetryAfterEventIDRetentionOnADailyBoard: README (Retention) promises that "an
// event id sent again after its retention but while its event is still in the history
// is answered 202 and changes nothing (the projector finds it applied)". On a daily board
// the retry is decided for the day it is sent (a retention is at least 24 h, so always a
// later day), and the projector's idempotency key is (user, event id, board, period):
// it does not find the event applied, and the same score is added a second time, to the
// new day; and one with another body, for another board, is added there. Found by a review.
func TestRetryAfterEventIDRetentionOnADailyBoard(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := &testClock{}
	start := time.Now().UTC().Truncate(24 * time.Hour).Add(12 * time.Hour) // noon today: far from midnight
	clock.set(start)
	svc := env.startWith(nil, clock.now)
	srv := mintToken(t, "gs", "server")
	body := `{"value": 9, "user_id": "rr", "event_id": "rr-1"}`
	first := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, body)
	if first.status != 200 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	day1 := first.body["period"]
	if g := svc.do(t, http.MethodPost, "/v1/boards/global/scores?wait=true", srv, `{"value": 3, "user_id": "rr", "event_id": "rr-g"}`); g.status != 200 {
		t.Fatalf("the global write: %d %s", g.status, g.raw)
	}

	// Two days later the relay's retention (event ids 24 h, history 90 days) prunes the
	// request log's row; the history row stays. (The rows were stamped by PostgreSQL's
	// clock, which the retention reads too: they are made two days old.)
	clock.set(start.Add(48 * time.Hour))
	for _, q := range []string{`UPDATE score_requests SET accepted_at = accepted_at - interval '48 hours'`,
		`UPDATE score_history SET applied_at = applied_at - interval '48 hours'`} {
		if _, err := env.db().Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	r := storage.NewRetention(env.db(), storage.RetentionConfig{EventIDs: 24 * time.Hour, History: 90 * 24 * time.Hour,
		Anomalies: 100, Interval: time.Hour, Now: clock.now}, slog.New(slog.DiscardHandler))
	if _, err := r.Prune(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := env.count(`SELECT count(*) FROM score_requests WHERE user_id = 'rr' AND event_id = 'rr-1'`); n != 0 {
		t.Fatalf("the event id is still in the request log (%d rows): the scenario needs it pruned", n)
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 'rr' AND event_id = 'rr-1'`); n != 1 {
		t.Fatalf("the event is %d times in the history before the retry, want once", n)
	}

	// The client sends the same event id again (a late retry, a replay): 202, and it must
	// change nothing.
	if retry := svc.do(t, http.MethodPost, "/v1/boards/daily/scores", srv, body); retry.status != 202 {
		t.Fatalf("retry after the retention: %d %s, want 202 (README)", retry.status, retry.raw)
	}
	// And the global write's event id with another body, for the daily board: 202 too (the
	// request log forgot it), and it must change nothing (README: "even with another body").
	if other := svc.do(t, http.MethodPost, "/v1/boards/daily/scores", srv, `{"value": 50, "user_id": "rr", "event_id": "rr-g"}`); other.status != 202 {
		t.Fatalf("another body after the retention: %d %s, want 202", other.status, other.raw)
	}
	// A later command of the same user, applied after the retry (one user's commands
	// apply in order): once it shows, the retry has been dealt with.
	after := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, `{"value": 1, "user_id": "rr", "event_id": "rr-2"}`)
	if after.status != 200 {
		t.Fatalf("the next write: %d %s", after.status, after.raw)
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 'rr' AND event_id = 'rr-1'`); n != 1 {
		t.Errorf("event rr-1 (first applied to %v) is %d times in the history after its retry: applied twice", day1, n)
	}
	if got := num(after.body["score"]); got != 1 {
		t.Errorf("the new day's entry is %d after one write of 1, the retry of an applied event and another body under an applied one: want 1", got)
	}
}
