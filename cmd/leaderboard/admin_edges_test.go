package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

// TestRemoveBannedEntry: an admin bans a cheater, then removes the cheated entry before an
// unban (which restores the others with their scores): the removal is taken, and after
// the unban the entry is gone. (The existence check read through the ban filter: 404.) A
// removal needs no reason.
func TestRemoveBannedEntry(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	svc := env.start(vars)
	srv, admin := mintToken(t, "gs", "server"), mintToken(t, "mod", "admin")
	if r := svc.do(t, http.MethodPost, "/v1/boards/global/scores?wait=true", srv, `{"value": 999, "user_id": "cheater"}`); r.status != 200 {
		t.Fatalf("seed: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodPost, "/admin/users/cheater/ban?wait=true", admin, `{"reason": "aimbot"}`); r.status != 200 {
		t.Fatalf("ban: %d %s", r.status, r.raw)
	}
	if n := env.count(`SELECT count(*) FROM board_entries WHERE user_id = 'cheater' AND board_id = 'global'`); n != 1 {
		t.Fatalf("the banned entry is not in PostgreSQL: %d", n)
	}
	r := svc.do(t, http.MethodDelete, "/admin/boards/global/entries/cheater?wait=true&reason=cheated+score", admin, "")
	if r.status != 200 {
		t.Fatalf("removing a banned user's entry (present in PostgreSQL): %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodDelete, "/admin/users/cheater/ban?wait=true", admin, `{"reason": "appeal"}`); r.status != 200 {
		t.Fatalf("unban: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/cheater", admin, ""); r.status != 404 {
		t.Errorf("the removed entry after the unban: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodDelete, "/admin/boards/global/entries/nobody?reason=x", admin, ""); r.status != 404 {
		t.Errorf("removing an entry nobody has: %d %s", r.status, r.raw)
	}
	// API.md's removal names no reason: one without is taken too (it was 400 invalid_reason).
	if r := svc.do(t, http.MethodPost, "/v1/boards/global/scores?wait=true", srv, `{"value": 5, "user_id": "plain"}`); r.status != 200 {
		t.Fatalf("seed: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodDelete, "/admin/boards/global/entries/plain?wait=true", admin, ""); r.status != 200 {
		t.Errorf("a removal without a reason: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/plain", admin, ""); r.status != 404 {
		t.Errorf("the entry removed without a reason: %d %s", r.status, r.raw)
	}
}

// TestAdminBadText: a NUL byte or bytes that are not UTF-8 in an admin filter or path are
// a client's mistake, not a dependency failure (they were 503 dependency_unavailable): a
// filter no stored text can match finds nothing, a user id that is none is 400.
func TestAdminBadText(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	svc := env.start(vars)
	admin := mintToken(t, "mod", "admin")
	for path, want := range map[string]int{"/admin/anomalies?user_id=%00": 200, "/admin/anomalies?reason=%ff": 200, "/admin/users/%00/ban": 400} {
		r := svc.do(t, http.MethodGet, path, admin, "")
		if items, _ := r.body["items"].([]any); r.status != want || (want == 200 && (items == nil || len(items) != 0)) {
			t.Errorf("GET %s: %d %s, want %d", path, r.status, r.raw, want)
		}
	}
}

// TestAdminReasonsAreText: a reason holding a NUL (which PostgreSQL's text cannot hold)
// or another control character is 400 invalid_reason on every admin endpoint that takes
// one, the season start's optional reason included, and changes nothing (it was 503
// dependency_unavailable, telling the client to retry what could never succeed, and the
// adjustment left its Redis hold behind). Found by a review.
func TestAdminReasonsAreText(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	srv, admin, player := mintToken(t, "gs", "server"), mintToken(t, "mod", "admin"), mintToken(t, "nu")
	if r := svc.do(t, http.MethodPost, "/v1/boards/global/scores?wait=true", srv, `{"value": 500, "user_id": "nu"}`); r.status != 200 {
		t.Fatalf("seed: %d %s", r.status, r.raw)
	}
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/admin/boards/global/entries/nu/adjust", `{"value": 1, "reason": "bad\u0000reason", "event_id": "nul-1"}`},
		{http.MethodPost, "/admin/boards/global/entries/nu/adjust", `{"value": 1, "reason": "bad\u001breason", "event_id": "esc-1"}`},
		{http.MethodDelete, "/admin/boards/global/entries/nu?reason=bad%00reason", ""},
		{http.MethodPost, "/admin/users/nu/ban", `{"reason": "bad\u0000reason"}`},
		{http.MethodPost, "/admin/boards/season/seasons", `{"season": "s-nul", "reason": "bad\u0000reason"}`},
	} {
		if r := svc.do(t, c.method, c.path, admin, c.body); r.status != http.StatusBadRequest || r.body["error_code"] != "invalid_reason" {
			t.Errorf("%s %s %s: %d %s, want 400 invalid_reason", c.method, c.path, c.body, r.status, r.raw)
		}
	}
	if n := env.count(`SELECT count(*) FROM admin_audit`) + env.count(`SELECT count(*) FROM seasons WHERE season = 's-nul'`); n != 0 {
		t.Errorf("%d audit rows or seasons after refused actions, want none", n)
	}
	if r := svc.submit(t, player, `{"score": 100}`); r.status != 200 || r.body["status"] != "unchanged" {
		t.Errorf("a lower score after the refused actions: %d %s, want 200 unchanged", r.status, r.raw)
	}
	multiline := `cheating\n\tsee ticket 42` // JSON escapes: a newline and a tab
	if r := svc.do(t, http.MethodPost, "/admin/users/nu/ban", admin, `{"reason": "`+multiline+`"}`); r.status != http.StatusAccepted {
		t.Errorf("a reason of two lines: %d %s, want 202", r.status, r.raw)
	}
}

// heldOn says which users an admin's command holds on a board period ("" when none).
func heldOn(env *testEnv, board, period string) string {
	if held := env.rdb.HGetAll(context.Background(), env.prefix+":{"+board+"}:"+period+":held").Val(); len(held) > 0 {
		return fmt.Sprintf("%s %s holds %v", board, period, held)
	}
	return ""
}

// wantUnchanged submits a best score on global that does not improve the entry and wants
// it answered 200 unchanged.
func wantUnchanged(t *testing.T, svc *service, tok, when, body string) {
	t.Helper()
	if r := svc.submit(t, tok, body); r.status != 200 || r.body["status"] != "unchanged" {
		t.Errorf("a lower score %s: %d %s, want 200 unchanged", when, r.status, r.raw)
	}
}

// TestAdminCommandNotAcceptedLeavesNoHold: an adjustment answered 409 (its event id used
// with another value), and a retry of one already applied, change nothing: the user's
// best score that does not improve the entry is still answered 200 "unchanged". Each put
// a hold on the entry in Redis before its outcome was known, and nothing released it for
// 24 hours: the user's writes were answered 202. Found by a review.
func TestAdminCommandNotAcceptedLeavesNoHold(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	srv, admin, player := mintToken(t, "gs", "server"), mintToken(t, "mod", "admin"), mintToken(t, "hx")
	if r := svc.do(t, http.MethodPost, "/v1/boards/global/scores?wait=true", srv, `{"value": 500, "user_id": "hx"}`); r.status != 200 {
		t.Fatalf("seed: %d %s", r.status, r.raw)
	}
	adjust := `{"value": 400, "reason": "fix", "event_id": "h-1"}`
	if r := svc.do(t, http.MethodPost, "/admin/boards/global/entries/hx/adjust?wait=true", admin, adjust); r.status != 200 {
		t.Fatalf("adjust: %d %s", r.status, r.raw)
	}
	held := func() string { return heldOn(env, "global", "all_time") }
	eventually(t, 10*time.Second, held)
	unchanged := func(when string, score int) {
		t.Helper()
		wantUnchanged(t, svc, player, when, fmt.Sprintf(`{"score": %d}`, score))
	}
	unchanged("before", 100)
	if r := svc.do(t, http.MethodPost, "/admin/boards/global/entries/hx/adjust", admin, `{"value": 450, "reason": "oops", "event_id": "h-1"}`); r.status != 409 {
		t.Fatalf("the event id with another value: %d %s", r.status, r.raw)
	}
	if msg := held(); msg != "" {
		t.Errorf("after a 409: %s", msg)
	}
	unchanged("after a 409", 101)
	if r := svc.do(t, http.MethodPost, "/admin/boards/global/entries/hx/adjust", admin, adjust); r.status != 202 {
		t.Fatalf("the applied adjustment retried: %d %s", r.status, r.raw)
	}
	if msg := held(); msg != "" {
		t.Errorf("after a retry of an applied adjustment: %s", msg)
	}
	unchanged("after a retry of an applied adjustment", 102)
}

// TestAdminCommandRefusedForAPlayersEventIDLeavesNoHold: the player hx's best score that
// does not improve her entry was answered 200 "unchanged" under her event id h-1 (recorded
// in the request log, never applied). An admin's adjustment of hx with event id h-1 is
// refused, 409 event_id_conflict: nothing of it will ever be applied, and its hold goes as
// after any other 409. A release that waited for the command recorded under h-1 to be
// applied, which a write answered unchanged never is, kept it for 24 hours: hx's writes
// that do not improve were answered 202 instead of 200 unchanged. Found by a review.
func TestAdminCommandRefusedForAPlayersEventIDLeavesNoHold(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	srv, admin, player := mintToken(t, "gs", "server"), mintToken(t, "mod", "admin"), mintToken(t, "hx")
	if r := svc.do(t, http.MethodPost, "/v1/boards/global/scores?wait=true", srv, `{"value": 500, "user_id": "hx"}`); r.status != 200 {
		t.Fatalf("seed: %d %s", r.status, r.raw)
	}
	wantUnchanged(t, svc, player, "under the event id h-1", `{"score": 100, "event_id": "h-1"}`)
	if r := svc.do(t, http.MethodPost, "/admin/boards/global/entries/hx/adjust", admin, `{"value": 400, "reason": "fix", "event_id": "h-1"}`); r.status != 409 {
		t.Fatalf("an adjustment under the player's event id: %d %s, want 409", r.status, r.raw)
	}
	if msg := heldOn(env, "global", "all_time"); msg != "" {
		t.Errorf("after the 409: %s", msg)
	}
	wantUnchanged(t, svc, player, "after the 409", `{"score": 101}`)
}

// TestAdminCommandRefusedForAPlayersAcceptedEventIDLeavesNoHold: the player hx's write
// under her event id h-1 is accepted (202) and still on its way (no relay or projector
// runs yet). An admin's adjustment of hx under h-1 is refused 409 event_id_conflict, and
// its hold goes: the command recorded under h-1 is a player's write, and the projector
// takes out only the holds of adjustments and removals. It was kept as "pending" and
// stayed 24 hours (hx's writes that do not improve answered 202). Found by a review.
func TestAdminCommandRefusedForAPlayersAcceptedEventIDLeavesNoHold(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	api := env.start(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker, "LEADERBOARD_ROLES": "api"})
	admin, player := mintToken(t, "mod", "admin"), mintToken(t, "hx")
	if r := api.submit(t, player, `{"score": 500, "event_id": "h-1"}`); r.status != 202 {
		t.Fatalf("the player's write under h-1: %d %s, want 202", r.status, r.raw)
	}
	if r := api.do(t, http.MethodPost, "/admin/boards/global/entries/hx/adjust", admin, `{"value": 400, "reason": "fix", "event_id": "h-1"}`); r.status != 409 {
		t.Fatalf("an adjustment under the player's event id: %d %s, want 409", r.status, r.raw)
	}
	// The pipeline runs now: the player's write is applied and mirrored.
	env.start(map[string]string{"LEADERBOARD_KAFKA_BROKERS": broker, "LEADERBOARD_ROLES": "relay,projector", "LEADERBOARD_HTTP_ADDR": "127.0.0.1:" + freePort(t)})
	eventually(t, 30*time.Second, func() string {
		if r := api.do(t, http.MethodGet, "/v1/boards/global/users/hx", player, ""); r.status != 200 || num(r.body["score"]) != 500 {
			return "hx's write is not applied: " + r.raw
		}
		return ""
	})
	if msg := heldOn(env, "global", "all_time"); msg != "" {
		t.Errorf("after the player's write was applied, the refused adjustment's hold is still there: %s (for 24 h)", msg)
	}
	wantUnchanged(t, api, player, "after the player's write was applied", `{"score": 100}`)
}

// TestAdminAdjustmentRetriedAfterTheResetLeavesNoHold: an admin's adjustment of hx on the
// weekly board fastest, accepted in week 1 (its period), is retried with the same body
// just after the week ended, before the projector applied it: 202, a duplicate. The retry
// holds hx under the event id in week 2 (the period it resolves to now); the command on its
// way is week 1's, so when the projector applies it, it takes the id out of week 1's hold
// only; the retry takes its week 2 hold out (the command on its way holds week 1). It was
// kept (the check looked at the board, not the period): hx was held for 24 hours in the
// week her writes go to, every slower lap of hers answered 202. Found by a review.
func TestAdminAdjustmentRetriedAfterTheResetLeavesNoHold(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clk := &testClock{}
	clk.set(time.Date(2026, 1, 4, 23, 59, 0, 0, time.UTC)) // Sunday: week 2026-W01 ends
	broker := "127.0.0.1:" + freePort(t)
	api := env.startWith(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker, "LEADERBOARD_ROLES": "api"}, clk.now)
	admin, player := mintToken(t, "mod", "admin"), mintToken(t, "hx")
	adjust := `{"value": 30000, "reason": "fix", "event_id": "a-1"}`
	if r := api.do(t, http.MethodPost, "/admin/boards/fastest/entries/hx/adjust", admin, adjust); r.status != 202 {
		t.Fatalf("adjust in week 1: %d %s", r.status, r.raw)
	}
	clk.set(time.Date(2026, 1, 5, 0, 0, 30, 0, time.UTC)) // Monday: week 2026-W02
	if r := api.do(t, http.MethodPost, "/admin/boards/fastest/entries/hx/adjust", admin, adjust); r.status != 202 {
		t.Fatalf("the adjustment retried after the reset: %d %s", r.status, r.raw)
	}
	env.startWith(map[string]string{"LEADERBOARD_KAFKA_BROKERS": broker, "LEADERBOARD_ROLES": "relay,projector", "LEADERBOARD_HTTP_ADDR": "127.0.0.1:" + freePort(t)}, clk.now)
	eventually(t, 30*time.Second, func() string {
		if env.count(`SELECT count(*) FROM score_history WHERE user_id = 'hx' AND event_id = 'a-1'`) == 0 {
			return "the adjustment is not applied"
		}
		return ""
	})
	// The projector takes its own id out of week 1 once Redis shows it.
	eventually(t, 10*time.Second, func() string { return heldOn(env, "fastest", "2026-W01") })
	if msg := heldOn(env, "fastest", "2026-W02"); msg != "" {
		t.Errorf("the adjustment is applied, yet week 2: %s (for 24 h)", msg)
	}
	if r := api.do(t, http.MethodPost, "/v1/boards/fastest/scores?wait=true", player, `{"value": 50000}`); r.status != 200 {
		t.Fatalf("hx's first lap of week 2: %d %s", r.status, r.raw)
	}
	if r := api.do(t, http.MethodPost, "/v1/boards/fastest/scores", player, `{"value": 60000}`); r.status != 200 || r.body["status"] != "unchanged" {
		t.Errorf("a slower lap of hx in week 2: %d %s, want 200 unchanged", r.status, r.raw)
	}
}

// TestSeasonNamesAreNotKeywords: ?period= reads "current" and "previous" as the board's
// current and previous seasons, so a season named either could never be read by its name
// once another started (a start took them). Found by a review.
func TestSeasonNamesAreNotKeywords(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	admin := mintToken(t, "mod", "admin")
	for _, name := range []string{"current", "previous"} {
		if r := svc.do(t, http.MethodPost, "/admin/boards/season/seasons", admin, `{"season": "`+name+`", "reason": "new season"}`); r.status != http.StatusBadRequest || r.body["error_code"] != "invalid_season" {
			t.Errorf("a season named %s: %d %s, want 400 invalid_season", name, r.status, r.raw)
		}
	}
	if r := svc.do(t, http.MethodPost, "/admin/boards/season/seasons", admin, `{"season": "Current-2", "reason": "new season"}`); r.status != http.StatusCreated {
		t.Errorf("a season named Current-2: %d %s, want 201", r.status, r.raw)
	}
	if n := env.count(`SELECT count(*) FROM seasons WHERE season IN ('current', 'previous')`); n != 0 {
		t.Errorf("%d seasons named like a keyword", n)
	}
}

// TestConsistencyExpiredMatch: a finished match's Redis keys expire after
// LEADERBOARD_MATCH_IDLE_TTL by design (reads load it back): the consistency check reports
// it consistent and not loaded (it reported every entry missing in Redis, and the CLI
// exited 1). A board Redis lost altogether is still reported (TestRebuildAfterRedisLoss).
func TestConsistencyExpiredMatch(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	vars["LEADERBOARD_BOARDS_FILE"] = ""
	svc := env.start(vars)
	srv, admin := mintToken(t, "gs", "server"), mintToken(t, "mod", "admin")
	if r := svc.do(t, http.MethodPost, "/v1/matches/m-1/users/alice/point?wait=true", srv, `{"point": 3}`); r.status != 200 {
		t.Fatalf("seed: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodGet, "/admin/consistency?board=match:m-1&mode=full", admin, ""); r.body["consistent"] != true {
		t.Fatalf("before expiry: %d %s", r.status, r.raw)
	}
	// The keys expire as a finished match's do (all of them, by design): deleted here
	// rather than waited for.
	ctx := context.Background()
	iter := env.rdb.Scan(ctx, 0, env.prefix+":{match:m-1}:*", 100).Iterator()
	for iter.Next(ctx) {
		env.rdb.Del(ctx, iter.Val())
	}
	r := svc.do(t, http.MethodGet, "/admin/consistency?board=match:m-1&mode=full", admin, "")
	if r.body["consistent"] != true || r.body["loaded"] != false {
		t.Errorf("after the match's keys expired by design: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodGet, "/v1/match-leaderboard/m-1/score", admin, ""); r.status != 200 {
		t.Errorf("read: %d %s", r.status, r.raw)
	}
}

// TestBulkRequeueNeedsABody: a bare POST /admin/dlq/requeue requeues nothing (400): the
// body, {} for every dead letter, is required (openapi.yaml).
func TestBulkRequeueNeedsABody(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	svc := env.start(vars)
	if r := svc.do(t, http.MethodPost, "/admin/dlq/requeue", mintToken(t, "mod", "admin"), ""); r.status != 400 || r.body["error_code"] != "invalid_json" {
		t.Errorf("bulk requeue without a body: %d %s", r.status, r.raw)
	}
}

// TestTrailCursorsPastInt32: GET /admin/anomalies and GET /admin/audit page by id
// (?cursor= is the next_cursor of the page before). The ids are BIGSERIAL: once they pass
// 2^31-1 (anomalies are recorded for every refused player write, so a busy service, or a
// crowd of players sending refused writes, gets there), following next_cursor must keep
// working, and a large cursor is no dependency failure (503 means a dependency is down).
// (The queries' "$1 = 0" typed the cursor as a 32-bit integer: found by a review.)
func TestTrailCursorsPastInt32(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	svc := env.start(vars)
	admin := mintToken(t, "ops", "admin")
	ctx := context.Background()
	for _, seq := range []string{"anomalies_id_seq", "admin_audit_id_seq"} {
		if _, err := env.db().Exec(ctx, `SELECT setval($1::regclass, 3000000000)`, seq); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 { // three refusals (value_out_of_range), recorded as anomalies
		if r := svc.do(t, http.MethodPost, "/v1/boards/arena/scores", mintToken(t, fmt.Sprintf("big-%d", i)), `{"value": 5000}`); r.status != 400 {
			t.Fatalf("refusal %d: %d %s", i, r.status, r.raw)
		}
	}
	for i := range 3 { // three admin actions, in the audit trail
		if r := svc.do(t, http.MethodPost, fmt.Sprintf("/admin/users/big-ban-%d/ban", i), admin, `{"reason": "test"}`); r.status != 202 {
			t.Fatalf("ban %d: %d %s", i, r.status, r.raw)
		}
	}
	walk := func(path string) (int, string) {
		t.Helper()
		n, cursor := 0, ""
		for range 10 {
			p := path + "?limit=1"
			if cursor != "" {
				p += "&cursor=" + cursor
			}
			r := svc.do(t, http.MethodGet, p, admin, "")
			if r.status != 200 {
				return n, fmt.Sprintf("GET %s (cursor from next_cursor): %d %s", p, r.status, r.raw)
			}
			n += len(r.body["items"].([]any))
			next, _ := r.body["next_cursor"].(string)
			if next == "" {
				return n, ""
			}
			cursor = next
		}
		return n, path + " does not end"
	}
	for _, path := range []string{"/admin/anomalies", "/admin/audit"} {
		var failure string
		eventually(t, 10*time.Second, func() string { // anomalies are written in the background
			n, fail := walk(path)
			if fail != "" {
				failure = fail
				return ""
			}
			if n < 3 {
				return fmt.Sprintf("%s: %d items", path, n)
			}
			return ""
		})
		if failure != "" {
			t.Errorf("%s", failure)
		}
		p := path + "?cursor=9223372036854775807"
		if r := svc.do(t, http.MethodGet, p, admin, ""); r.status == http.StatusServiceUnavailable || r.status >= 500 {
			t.Errorf("GET %s: %d %s; a large cursor is no dependency failure", p, r.status, r.raw)
		}
	}
}

// TestAdjustEventIDReusedWithAnotherReasonIs409: API.md says the same event_id with a
// different body is 409. An adjustment's body is {"value", "period"?, "reason",
// "event_id"?}. The idempotency hash left the reason out, so a second adjustment under the
// same event id with another reason was answered as the first (202), and the audit trail
// kept only the first reason (found by a review).
func TestAdjustEventIDReusedWithAnotherReasonIs409(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	srv, admin := mintToken(t, "gs", "server"), mintToken(t, "mod", "admin")
	if r := svc.do(t, http.MethodPost, "/v1/boards/global/scores?wait=true", srv, `{"value": 500, "user_id": "rz"}`); r.status != 200 {
		t.Fatalf("seed: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodPost, "/admin/boards/global/entries/rz/adjust?wait=true", admin, `{"value": 400, "reason": "bugged level", "event_id": "rz-1"}`); r.status != 200 {
		t.Fatalf("adjust: %d %s", r.status, r.raw)
	}
	r := svc.do(t, http.MethodPost, "/admin/boards/global/entries/rz/adjust", admin, `{"value": 400, "reason": "a different reason", "event_id": "rz-1"}`)
	if r.status != http.StatusConflict {
		t.Errorf("the same event id with another reason: %d %s, want 409 event_id_conflict", r.status, r.raw)
	}
}

// TestAPIRefusesAnotherShardCountWhileCommandsWait: an API process records the outbox's
// shard count; started again with another count while a command it accepted still waits
// in the outbox (no relay runs here), it refuses to start, naming the variable: a user's
// next command would go to another shard than the one waiting and could overtake it.
// With the recorded count it starts.
func TestAPIRefusesAnotherShardCountWhileCommandsWait(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	api := map[string]string{"LEADERBOARD_ROLES": "api"}
	svc := env.start(api)
	if r := svc.submit(t, mintToken(t, "sc"), `{"score": 1, "event_id": "sc-1"}`); r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.raw)
	}
	svc.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	logs := &storagetest.SyncBuffer{}
	more := map[string]string{"LEADERBOARD_ROLES": "api", "LEADERBOARD_OUTBOX_SHARDS": "8"}
	if err := runWith(ctx, nil, env.getenv(more), logs, time.Now); err == nil || !strings.Contains(err.Error(), "LEADERBOARD_OUTBOX_SHARDS=8") {
		t.Fatalf("an API with 8 shards while a command waits in the outbox of 2: %v, want a refusal to start\n%s", err, logs.String())
	}
	env.start(api).stop(t)
}

// TestAdjustRefusesAPeriodNotBegun: an adjustment of a day or week that has not begun is
// 400 invalid_period and writes nothing (it was applied, and seeded that day's board in
// Redis for as long as until it ends; found by a review of the admin endpoints).
func TestAdjustRefusesAPeriodNotBegun(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := &testClock{}
	clock.set(time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC))
	svc := env.startWith(nil, clock.now)
	admin := mintToken(t, "ops", "admin")
	for _, c := range []struct{ board, period string }{{"daily", "2026-05-05"}, {"daily", "2062-11-28"}} {
		r := svc.do(t, http.MethodPost, "/admin/boards/"+c.board+"/entries/fx/adjust?wait=true", admin, `{"value": 50, "reason": "fix", "period": "`+c.period+`"}`)
		if r.status != 400 || r.body["error_code"] != "invalid_period" {
			t.Errorf("adjust %s %s (not begun): %d %s, want 400 invalid_period", c.board, c.period, r.status, r.raw)
		}
	}
	if r := svc.do(t, http.MethodPost, "/admin/boards/daily/entries/fx/adjust?wait=true", admin, `{"value": 50, "reason": "fix", "period": "2026-05-03"}`); r.status != 200 {
		t.Errorf("adjust of yesterday: %d %s, want 200", r.status, r.raw)
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 'fx' AND period <> '2026-05-03'`); n != 0 {
		t.Errorf("%d history rows of periods not begun", n)
	}
}

// TestAdminWaitAnswersAppliedOnceReadsShowIt: an admin's removal (or adjustment) with
// ?wait=true was answered 200 applied once PostgreSQL held it; the projector mirrors it in
// Redis after, so a top read right after still showed the removed cheater (make test saw
// it once). The answer now waits until reads show it, as a write's does. Here the
// projector's Redis is down (its own proxy) while the API's reads answer from Redis: the
// removal is applied in PostgreSQL and not shown, so the wait ends 202; once the
// projector's Redis is back, reads show it.
func TestAdminWaitAnswersAppliedOnceReadsShowIt(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	api := env.start(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker, "LEADERBOARD_ROLES": "api", "LEADERBOARD_WAIT_TIMEOUT": "2s"})
	px := newProxy(t, testRedis)
	env.start(map[string]string{"LEADERBOARD_KAFKA_BROKERS": broker, "LEADERBOARD_ROLES": "relay,projector",
		"LEADERBOARD_HTTP_ADDR": "127.0.0.1:" + freePort(t), "LEADERBOARD_REDIS_URL": "redis://" + px.addr() + "/0"})
	srv, admin, viewer := mintToken(t, "gs", "server"), mintToken(t, "mod", "admin"), mintToken(t, "viewer")
	for _, body := range []string{`{"value": 300, "user_id": "cheat"}`, `{"value": 100, "user_id": "fair"}`} {
		if r := api.do(t, http.MethodPost, "/v1/boards/global/scores?wait=true", srv, body); r.status != 200 {
			t.Fatalf("seed: %d %s", r.status, r.raw)
		}
	}
	px.setDown(true)
	r := api.do(t, http.MethodDelete, "/admin/boards/global/entries/cheat?wait=true&reason=cheating", admin, "")
	top := entryOrder(t, api.do(t, http.MethodGet, "/v1/boards/global/top", viewer, ""))
	if r.status == 200 && top != "fair:100" {
		t.Fatalf("the removal answered %d %s while the top still reads %s: applied is not shown", r.status, r.raw, top)
	}
	if r.status != 202 {
		t.Fatalf("the removal while the projector cannot mirror it: %d %s, want 202 after the wait", r.status, r.raw)
	}
	eventually(t, 20*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM score_history WHERE operator = 'remove' AND user_id = 'cheat'`); n != 1 {
			return fmt.Sprintf("%d removals in the history", n)
		}
		return ""
	})
	px.setDown(false)
	eventually(t, 30*time.Second, func() string {
		if got := entryOrder(t, api.do(t, http.MethodGet, "/v1/boards/global/top", viewer, "")); got != "fair:100" {
			return "top " + got
		}
		return ""
	})
	// An adjustment with the projector's Redis up is answered applied, and shown.
	if r := api.do(t, http.MethodPost, "/admin/boards/global/entries/fair/adjust?wait=true", admin, `{"value": 50, "reason": "bugged level"}`); r.status != 200 || r.body["status"] != "applied" {
		t.Fatalf("adjust: %d %s", r.status, r.raw)
	}
	if got := entryOrder(t, api.do(t, http.MethodGet, "/v1/boards/global/top", viewer, "")); got != "fair:50" {
		t.Errorf("top right after the adjustment answered applied: %s, want fair:50", got)
	}
	// A banned user's entry is left out of reads: its adjustment is shown once applied.
	if r := api.do(t, http.MethodPost, "/admin/users/fair/ban?wait=true", admin, `{"reason": "cheating"}`); r.status != 200 {
		t.Fatalf("ban: %d %s", r.status, r.raw)
	}
	start := time.Now()
	if r := api.do(t, http.MethodPost, "/admin/boards/global/entries/fair/adjust?wait=true", admin, `{"value": 40, "reason": "while banned"}`); r.status != 200 || r.body["status"] != "applied" {
		t.Errorf("adjust of a banned user's entry: %d %s after %s, want 200 applied", r.status, r.raw, time.Since(start).Round(time.Millisecond))
	}
}
