package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestCursorWalkGoesOnAcrossMidnight: a client walks today's daily board with the cursor
// it was given (no date: "default today"); midnight passes between two pages. The cursor
// names its day; following it must go on listing that day, not fail the walk.
func TestCursorWalkGoesOnAcrossMidnight(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := &testClock{}
	clock.set(time.Date(2026, 5, 4, 23, 59, 0, 0, time.UTC))
	svc := env.startWith(nil, clock.now)
	srv, viewer := mintToken(t, "gs", "server"), mintToken(t, "viewer")
	for i, u := range []string{"ma", "mb", "mc"} {
		if r := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, fmt.Sprintf(`{"value": %d, "user_id": %q}`, 10-i, u)); r.status != 200 {
			t.Fatalf("write: %d %s", r.status, r.raw)
		}
	}
	r := svc.do(t, http.MethodGet, "/v1/daily-leaderboard?size=1", viewer, "")
	cursor, _ := r.body["cursor"].(string)
	if r.status != 200 || r.body["date"] != "2026-05-04" || cursor == "" {
		t.Fatalf("first page: %d %s", r.status, r.raw)
	}
	clock.set(time.Date(2026, 5, 5, 0, 0, 1, 0, time.UTC))
	r = svc.do(t, http.MethodGet, "/v1/daily-leaderboard?size=1&cursor="+url.QueryEscape(cursor), viewer, "")
	if r.status != 200 {
		t.Fatalf("second page, one second after midnight: %d %s", r.status, r.raw)
	}
}

// TestCursorWalkOfPreviousGoesOnAcrossMidnight: a client walks yesterday's
// daily board page by page (GET /v1/boards/daily/entries?period=previous, then the same
// with &cursor=next_cursor), and midnight passes between two pages. The cursor is bound to
// the day it was issued for (2026-05-03), and "previous" is a relative keyword like
// "current", which pagePeriod already resolves to the cursor's own period. Following
// next_cursor must go on listing the day the walk started on (API.md: "following
// next_cursor to the end lists every entry once"); it is 400 invalid_cursor instead,
// because "previous" now names 2026-05-04.
func TestCursorWalkOfPreviousGoesOnAcrossMidnight(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := &testClock{}
	clock.set(time.Date(2026, 5, 3, 12, 0, 0, 0, time.UTC))
	svc := env.startWith(nil, clock.now)
	srv, viewer := mintToken(t, "gs", "server"), mintToken(t, "viewer")
	for i, u := range []string{"pa", "pb", "pc"} {
		if r := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, fmt.Sprintf(`{"value": %d, "user_id": %q}`, 10-i, u)); r.status != 200 {
			t.Fatalf("write: %d %s", r.status, r.raw)
		}
	}
	clock.set(time.Date(2026, 5, 4, 23, 59, 0, 0, time.UTC))
	r := svc.do(t, http.MethodGet, "/v1/boards/daily/entries?period=previous&size=1", viewer, "")
	cursor, _ := r.body["next_cursor"].(string)
	if r.status != 200 || r.body["period"] != "2026-05-03" || cursor == "" || entryOrder(t, r) != "pa:10" {
		t.Fatalf("first page of the previous day: %d %s", r.status, r.raw)
	}
	clock.set(time.Date(2026, 5, 5, 0, 0, 1, 0, time.UTC))
	r = svc.do(t, http.MethodGet, "/v1/boards/daily/entries?period=previous&size=1&cursor="+url.QueryEscape(cursor), viewer, "")
	es, _ := r.body["entries"].([]any)
	if r.status != 200 || r.body["period"] != "2026-05-03" || len(es) != 1 || es[0].(map[string]any)["user_id"] != "pb" || num(es[0].(map[string]any)["rank"]) != 2 {
		t.Errorf("second page of the walk of 2026-05-03, one second after midnight: %d %s; want 200 with pb:9 of 2026-05-03", r.status, r.raw)
	}
}

// TestReadOfADayNotBegunHereFreezesNothing: just after midnight, a process whose clock is
// a little behind is asked for the new day (a client learnt it from another process). The
// day has not begun by this clock: it is read from PostgreSQL as it is. It was read as a
// closed period, whose first read freezes it: the day current everywhere had its entries
// frozen, and every update of them then kept the rank index (found by a review of the time
// paths).
func TestReadOfADayNotBegunHereFreezesNothing(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := &testClock{}
	clock.set(time.Date(2026, 5, 5, 0, 0, 1, 0, time.UTC))
	svc := env.startWith(nil, clock.now)
	srv := mintToken(t, "gs", "server")
	for _, u := range []string{"fa", "fb"} {
		writeAs(t, svc, "daily", u, 3)
	}
	clock.set(time.Date(2026, 5, 4, 23, 59, 59, 500_000_000, time.UTC)) // this process 1.5 s behind
	r := svc.do(t, http.MethodGet, "/v1/boards/daily/top?period=2026-05-05", srv, "")
	if r.status != 200 || !strings.Contains(r.raw, `"fa"`) || !strings.Contains(r.raw, `"fb"`) {
		t.Fatalf("the day not begun here: %d %s", r.status, r.raw)
	}
	if n := env.count(`SELECT count(closed_sort_key) FROM board_entries WHERE board_id = 'daily' AND period = '2026-05-05'`); n > 0 {
		t.Errorf("the current day has %d frozen entries after one read from a process 1.5 s behind", n)
	}
}
