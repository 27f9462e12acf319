package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
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
	svc := env.startWith(nil, clock.now)
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

// TestUnchangedWriteRetriedAfterTheReset: on the weekly best board
// "fastest" a player's write that does not improve is answered 200 unchanged for the week
// it was made in, and recorded so (RecordUnchanged) so that a retry is answered so again
// and never applied. Retried (same event id, same body) just after the weekly reset, it
// must be answered as the first time: unchanged, that week. It was resolved for the new
// week, where the player has no entry, and fell through to 202 "accepted" for a command
// that is not in the outbox and would never be applied. Found by a review.
func TestUnchangedWriteRetriedAfterTheReset(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := &testClock{}
	clock.set(time.Date(2026, 5, 10, 23, 59, 40, 0, time.UTC)) // Sunday: week 2026-W19 ends at midnight
	svc := env.startWith(nil, clock.now)
	alice := mintToken(t, "alice")
	if r := svc.do(t, http.MethodPost, "/v1/boards/fastest/scores?wait=true", alice, `{"value": 30, "event_id": "f-1"}`); r.status != 200 || r.body["status"] != "applied" {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	body := `{"value": 40, "event_id": "f-2"}` // slower: does not improve
	first := svc.do(t, http.MethodPost, "/v1/boards/fastest/scores", alice, body)
	if first.status != 200 || first.body["status"] != "unchanged" || first.body["period"] != "2026-W19" {
		t.Fatalf("unchanged write: %d %s", first.status, first.raw)
	}
	clock.set(time.Date(2026, 5, 11, 0, 0, 10, 0, time.UTC)) // Monday: week 2026-W20
	retry := svc.do(t, http.MethodPost, "/v1/boards/fastest/scores", alice, body)
	if retry.status != 200 || retry.body["status"] != "unchanged" || retry.body["period"] != "2026-W19" || num(retry.body["score"]) != 30 {
		t.Errorf("the unchanged write retried 10 s after the weekly reset: %d %s, want it answered as the first time: %s", retry.status, retry.raw, first.raw)
	}
}

// TestUnchangedWriteRetriedAfterTheResetWhereItDoesNotImprove: a write answered 200
// unchanged in week W19 and retried (same event id, same body) after the weekly reset must
// be answered as the first time: unchanged, week W19, with that week's entry, also when
// the player already has a better entry in W20 (Redis then says "unchanged" for W20 too;
// the answer named W20 and its entry). The request log keeps the period an unchanged write
// was answered for (migration 0015). Found by a review.
func TestUnchangedWriteRetriedAfterTheResetWhereItDoesNotImprove(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := &testClock{}
	clock.set(time.Date(2026, 5, 10, 23, 59, 40, 0, time.UTC)) // Sunday: week 2026-W19 ends at midnight
	svc := env.startWith(nil, clock.now)
	alice := mintToken(t, "alice")
	if r := svc.do(t, http.MethodPost, "/v1/boards/fastest/scores?wait=true", alice, `{"value": 30, "event_id": "g-1"}`); r.status != 200 || r.body["status"] != "applied" {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	body := `{"value": 40, "event_id": "g-2"}` // slower: does not improve
	first := svc.do(t, http.MethodPost, "/v1/boards/fastest/scores", alice, body)
	if first.status != 200 || first.body["status"] != "unchanged" || first.body["period"] != "2026-W19" || num(first.body["score"]) != 30 {
		t.Fatalf("unchanged write: %d %s", first.status, first.raw)
	}
	clock.set(time.Date(2026, 5, 11, 0, 0, 10, 0, time.UTC)) // Monday: week 2026-W20
	if r := svc.do(t, http.MethodPost, "/v1/boards/fastest/scores?wait=true", alice, `{"value": 20, "event_id": "g-3"}`); r.status != 200 || r.body["status"] != "applied" || r.body["period"] != "2026-W20" {
		t.Fatalf("the new week's write: %d %s", r.status, r.raw)
	}
	retry := svc.do(t, http.MethodPost, "/v1/boards/fastest/scores", alice, body)
	if retry.status != 200 || retry.body["status"] != "unchanged" || retry.body["period"] != "2026-W19" || num(retry.body["score"]) != 30 {
		t.Errorf("the unchanged write retried after the weekly reset, the player having a better entry that week: %d %s, want it answered as the first time: %s", retry.status, retry.raw, first.raw)
	}
}

// TestUnchangedWriteRetriedAfterANewSeason: the same on a best board by seasons. A write
// answered 200 unchanged in season 1, retried (same event id, same body) after an admin
// started season 2, must be answered as the first time: unchanged, season 1 (a period
// recomputed from the write's time named the newest season, where the player had no entry,
// and the retry fell through to 202 "accepted" for a command never to be applied). Found
// by a review.
func TestUnchangedWriteRetriedAfterANewSeason(t *testing.T) {
	t.Parallel()
	example, err := os.ReadFile("../../configs/boards.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "boards.yaml")
	boards := strings.TrimRight(string(example), "\n") + "\n  - id: ranked\n    operator: best\n    period: season\n    min_value: 0\n    max_value: 1000000\n"
	if err := os.WriteFile(file, []byte(boards), 0o600); err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t)
	svc := env.start(map[string]string{"LEADERBOARD_BOARDS_FILE": file})
	alice, admin := mintToken(t, "alice"), mintToken(t, "mod", "admin")
	if r := svc.do(t, http.MethodPost, "/v1/boards/ranked/scores?wait=true", alice, `{"value": 50, "event_id": "s-1"}`); r.status != 200 || r.body["status"] != "applied" || r.body["period"] != "1" {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	body := `{"value": 40, "event_id": "s-2"}` // lower: does not improve
	first := svc.do(t, http.MethodPost, "/v1/boards/ranked/scores", alice, body)
	if first.status != 200 || first.body["status"] != "unchanged" || first.body["period"] != "1" {
		t.Fatalf("unchanged write: %d %s", first.status, first.raw)
	}
	if r := svc.do(t, http.MethodPost, "/admin/boards/ranked/seasons", admin, `{"season": "2", "reason": "new season"}`); r.status != http.StatusCreated {
		t.Fatalf("start season 2: %d %s", r.status, r.raw)
	}
	retry := svc.do(t, http.MethodPost, "/v1/boards/ranked/scores", alice, body)
	if retry.status != 200 || retry.body["status"] != "unchanged" || retry.body["period"] != "1" || num(retry.body["score"]) != 50 {
		t.Errorf("the unchanged write retried after a new season: %d %s, want it answered as the first time: %s", retry.status, retry.raw, first.raw)
	}
}

// TestWaitedRetryAfterTheEventIDsRetention: an increment applied with ?wait=true and
// retried (same event id, same body, ?wait=true) after LEADERBOARD_EVENT_ID_RETENTION took
// its event id out of the request log, while the history still holds it. The API accepts
// the retry as new and the projector skips it (the history says it was applied), so it is
// answered as the first time: 200 applied with the entry as it is, the delta counted once.
// The wait looked for an entry updated at or after the retry's acceptance, which never
// came, and answered 202 after LEADERBOARD_WAIT_TIMEOUT.
func TestWaitedRetryAfterTheEventIDsRetention(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.startWith(nil, nil)
	srv := mintToken(t, "gs", "server")
	body := `{"user_id": "ret", "delta": 5, "event_id": "ret-1", "timestamp": "` + time.Now().UTC().Format(time.RFC3339) + `"}`
	first := svc.do(t, http.MethodPost, "/v1/scores/increment?wait=true", srv, body)
	if first.status != 200 || num(first.body["score"]) != 5 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	forgetEventID(t, env, "ret-1") // eight days later by the request log
	start := time.Now()
	retry := svc.do(t, http.MethodPost, "/v1/scores/increment?wait=true", srv, body)
	if retry.status != 200 || retry.body["status"] != "applied" || num(retry.body["score"]) != 5 || retry.body["processed_event_id"] != "ret-1" {
		t.Errorf("the retry after the event id's retention: %d %s after %s, want 200 applied with score 5 as the first time: %s",
			retry.status, retry.raw, time.Since(start).Round(time.Millisecond), first.raw)
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 'ret' AND event_id = 'ret-1'`); n != 1 {
		t.Errorf("the increment is %d times in the history, want once", n)
	}
	// Another delta under the event id forgotten again is skipped too: it must not be
	// answered applied.
	forgetEventID(t, env, "ret-1")
	other := strings.Replace(body, `"delta": 5`, `"delta": 9`, 1)
	if r := svc.do(t, http.MethodPost, "/v1/scores/increment?wait=true", srv, other); r.status == 200 {
		t.Errorf("another delta under the forgotten event id: %d %s, want it not answered applied (the projector skips it)", r.status, r.raw)
	}
	// Nor is its retry, which the request log now answers as a duplicate.
	if r := svc.do(t, http.MethodPost, "/v1/scores/increment?wait=true", srv, other); r.status == 200 {
		t.Errorf("the retry of the skipped delta: %d %s, want it not answered applied (the delta of 9 was never applied)", r.status, r.raw)
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 'ret'`); n != 1 {
		t.Errorf("the history holds %d rows of the user, want the first delta's only", n)
	}
}

// TestSkippedWriteIsNotAppliedByTheUsersNextWrite: another delta under a forgotten event
// id (skipped by the projector) waits with ?wait=true while the user's next increment (a
// new event id) is applied. The skipped write must not be answered applied: the wait took
// the entry's update after the acceptance for it.
func TestSkippedWriteIsNotAppliedByTheUsersNextWrite(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.startWith(nil, nil)
	srv := mintToken(t, "gs", "server")
	now := time.Now().UTC().Format(time.RFC3339)
	body := `{"user_id": "ret", "delta": 5, "event_id": "ret-1", "timestamp": "` + now + `"}`
	if first := svc.do(t, http.MethodPost, "/v1/scores/increment?wait=true", srv, body); first.status != 200 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	forgetEventID(t, env, "ret-1")
	other := strings.Replace(body, `"delta": 5`, `"delta": 9`, 1)
	done := make(chan response, 1)
	go func() { // not svc.do: no t.Fatal off the test's goroutine
		req, _ := http.NewRequest(http.MethodPost, svc.base+"/v1/scores/increment?wait=true", strings.NewReader(other))
		req.Header.Set("Authorization", "Bearer "+srv)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- response{raw: err.Error()}
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		done <- response{status: resp.StatusCode, raw: string(raw)}
	}()
	time.Sleep(300 * time.Millisecond)
	next := `{"user_id": "ret", "delta": 1, "event_id": "ret-2", "timestamp": "` + now + `"}`
	if n := svc.do(t, http.MethodPost, "/v1/scores/increment?wait=true", srv, next); n.status != 200 || num(n.body["score"]) != 6 {
		t.Fatalf("next: %d %s", n.status, n.raw)
	}
	if got := <-done; got.status == 200 {
		t.Errorf("the skipped delta of 9: %d %s, want it not answered applied", got.status, got.raw)
	}
}

// TestBestRetryAfterTheEventIDsRetention: on a best board, the same score sent again after
// its event id's retention does not beat the entry it made: it is answered 200 unchanged,
// as any such write, and changes nothing (README, Retention).
func TestBestRetryAfterTheEventIDsRetention(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.startWith(nil, nil)
	bob := mintToken(t, "bob")
	body := `{"score": 700, "event_id": "bob-1"}`
	if first := svc.do(t, http.MethodPost, "/v1/scores?wait=true", bob, body); first.status != 200 || first.body["status"] != "applied" {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	forgetEventID(t, env, "bob-1")
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", bob, body); r.status != 200 || r.body["status"] != "unchanged" || num(r.body["score"]) != 700 {
		t.Errorf("the same score after its event id's retention: %d %s, want 200 unchanged", r.status, r.raw)
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 'bob'`); n != 1 {
		t.Errorf("the history holds %d rows of bob, want 1", n)
	}
}

// forgetEventID ages an event id's row in the request log past the default
// LEADERBOARD_EVENT_ID_RETENTION (7 days) and runs one retention pass with the default
// retentions, which takes it out; the history keeps the event (90 days).
func forgetEventID(t *testing.T, env *testEnv, eventID string) {
	t.Helper()
	ctx := t.Context()
	if _, err := env.db().Exec(ctx, `UPDATE score_requests SET accepted_at = accepted_at - interval '8 days' WHERE event_id = $1`, eventID); err != nil {
		t.Fatal(err)
	}
	r := storage.NewRetention(env.db(), storage.RetentionConfig{EventIDs: 7 * 24 * time.Hour, History: 90 * 24 * time.Hour, Anomalies: 1000,
		Interval: 10 * time.Minute}, slog.New(slog.DiscardHandler))
	if _, err := r.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n := env.count(`SELECT count(*) FROM score_requests WHERE event_id = $1`, eventID); n != 0 {
		t.Fatalf("the request log still holds %s after the retention pass", eventID)
	}
}

// TestWaitedRetryOfAClosedPeriodIsAnsweredApplied: a daily write answered 200 applied is
// retried with ?wait=true days later, within its event id's retention, when Redis no
// longer keeps its day. It is answered as the first time, from PostgreSQL (it waited out
// LEADERBOARD_WAIT_TIMEOUT and answered 202: the wait read Redis only; found by a review
// of the time paths).
func TestWaitedRetryOfAClosedPeriodIsAnsweredApplied(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := &testClock{}
	clock.set(time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC))
	svc := env.startWith(map[string]string{"LEADERBOARD_WAIT_TIMEOUT": "20s"}, clock.now)
	srv := mintToken(t, "gs", "server")
	writeAs(t, svc, "daily", "rd-other", 9)
	body := `{"value": 5, "user_id": "rd", "event_id": "rd-1"}`
	first := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, body)
	if first.status != 200 || first.body["period"] != "2026-05-04" || num(first.body["rank"]) != 2 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	clock.set(time.Date(2026, 5, 7, 2, 0, 0, 0, time.UTC)) // Redis keeps the day and 2 before
	start := time.Now()
	retry := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, body)
	for _, f := range []string{"status", "event_id", "score", "rank", "period", "updated_at"} {
		if retry.status != 200 || fmt.Sprint(retry.body[f]) != fmt.Sprint(first.body[f]) {
			t.Fatalf("the retry three days later: %d %s after %s, want 200 as the first time: %s", retry.status, retry.raw, time.Since(start).Round(time.Millisecond), first.raw)
		}
	}
}
