package main

import (
	"net/http"
	"testing"
	"time"
)

// TestAdjustRetriedAfterMidnight: an admin adjusts a daily entry without naming the
// period (the current one), with an event id; the client retries the very same request
// just after midnight. The contract: the same event_id with the same body is answered as
// the first time and applied once: to the day it was accepted for, which a wait=true
// retry names. It was 409 event_id_conflict: the command's idempotency hash held the
// period the server resolved (a new day), where a player's write leaves it out. Found by a
// review.
func TestAdjustRetriedAfterMidnight(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := &testClock{}
	clock.set(time.Date(2026, 5, 4, 23, 59, 0, 0, time.UTC))
	svc := env.startWith(nil, clock.now)
	srv, admin := mintToken(t, "gs", "server"), mintToken(t, "mod", "admin")
	if r := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, `{"value": 40, "user_id": "dj"}`); r.status != 200 || r.body["period"] != "2026-05-04" {
		t.Fatalf("seed: %d %s", r.status, r.raw)
	}
	body := `{"value": 7, "reason": "bugged level", "event_id": "adj-mid"}`
	first := svc.do(t, http.MethodPost, "/admin/boards/daily/entries/dj/adjust?wait=true", admin, body)
	if first.status != 200 || first.body["period"] != "2026-05-04" {
		t.Fatalf("adjust: %d %s", first.status, first.raw)
	}
	clock.set(time.Date(2026, 5, 5, 0, 0, 30, 0, time.UTC))
	retry := svc.do(t, http.MethodPost, "/admin/boards/daily/entries/dj/adjust?wait=true", admin, body)
	if retry.status != 200 || retry.body["period"] != "2026-05-04" {
		t.Errorf("the same adjustment retried 30 s after midnight: %d %s, want it answered as the first time: %s", retry.status, retry.raw, first.raw)
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 'dj' AND event_id = 'adj-mid'`); n != 1 {
		t.Errorf("the adjustment is %d times in the history, want once", n)
	}
	if n := env.count(`SELECT count(*) FROM board_entries WHERE user_id = 'dj' AND period = '2026-05-05'`); n != 0 {
		t.Errorf("the retry created an entry on the new day")
	}
}

// TestWriteRetriedAfterMidnightWaits: a daily write applied with ?wait=true before
// midnight, retried (same event id, same body, ?wait=true) just after it, must be answered
// as the first time: 200 applied, for the day it was accepted on. The retry was resolved
// for the new day and waited for an application to that day that never came, then
// answered 202. Found by a review.
func TestWriteRetriedAfterMidnightWaits(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := &testClock{}
	clock.set(time.Date(2026, 5, 4, 23, 59, 50, 0, time.UTC))
	svc := env.startWith(map[string]string{"LEADERBOARD_WAIT_TIMEOUT": "5s"}, clock.now)
	srv := mintToken(t, "gs", "server")
	body := `{"value": 9, "user_id": "rw", "event_id": "rw-1"}`
	first := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, body)
	if first.status != 200 || first.body["period"] != "2026-05-04" {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	clock.set(time.Date(2026, 5, 5, 0, 0, 10, 0, time.UTC))
	retry := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, body)
	if retry.status != 200 || retry.body["status"] != "applied" || retry.body["period"] != "2026-05-04" || num(retry.body["score"]) != 9 {
		t.Errorf("the retry after midnight: %d %s, want as the first time: %s", retry.status, retry.raw, first.raw)
	}
}
