package main

import (
	"fmt"
	"net/http"
	"net/url"
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
