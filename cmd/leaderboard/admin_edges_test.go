package main

import (
	"context"
	"net/http"
	"testing"
)

// TestRemoveBannedEntry: an admin bans a cheater, then removes the cheated entry before an
// unban (which restores the others with their scores): the removal is taken, and after
// the unban the entry is gone. (The existence check read through the ban filter: 404.)
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
