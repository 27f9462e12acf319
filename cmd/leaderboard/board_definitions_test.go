package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

// TestBoardDefinitionsGuardTheirEntries: a board that holds entries keeps its operator,
// order and period, and bounds its entries lie within: a boards file that changes them
// stops the start with a message naming the board (a flipped order ranked old and new
// entries on two scales, a lowered max_value clamped the next increment's total down, a
// waiting increment was applied as a set). Boards without entries, and bounds that still
// hold every entry, may change. Found by a review of operators' mistakes.
func TestBoardDefinitionsGuardTheirEntries(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	dir := t.TempDir()
	file := func(boards string) map[string]string {
		path := filepath.Join(dir, "boards.json")
		if err := os.WriteFile(path, []byte(`{"boards": [`+boards+`]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		return map[string]string{"LEADERBOARD_BOARDS_FILE": path}
	}
	// laps also carries the match board, whose entries are stored under match:{id}.
	const laps = `{"id": "xp", "operator": "incr", "period": "all_time"}, {"id": "laps", "operator": "best", "order": "asc", "period": "weekly", "min_value": 1}, ` +
		`{"id": "match", "operator": "incr", "period": "match", "server_only": true}`
	svc := env.start(file(`{"id": "global", "operator": "best", "period": "all_time", "max_value": 1000}, ` +
		`{"id": "points", "operator": "incr", "period": "all_time", "max_value": 5000}, ` + laps))
	srv := mintToken(t, "gs", "server")
	for _, w := range []string{`/v1/boards/global/scores?wait=true {"value": 900, "user_id": "a"}`, `/v1/boards/points/scores?wait=true {"value": 100, "user_id": "a"}`, `/v1/boards/xp/scores?wait=true {"value": 7, "user_id": "a"}`, `/v1/boards/match:m1/scores?wait=true {"value": 3, "user_id": "a"}`} {
		path, body, _ := strings.Cut(w, " ")
		if r := svc.do(t, "POST", path, srv, body); r.status != 200 {
			t.Fatalf("%s: %d %s", w, r.status, r.raw)
		}
	}
	svc.stop(t)

	refused := func(boards, want string) {
		t.Helper()
		logs := &storagetest.SyncBuffer{}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := runWith(ctx, nil, env.getenv(file(boards)), logs, time.Now)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("start with %s: %v, want an error saying %q", boards, err, want)
		}
	}
	refused(`{"id": "global", "operator": "best", "order": "asc", "period": "all_time", "max_value": 1000}, `+
		`{"id": "points", "operator": "incr", "period": "all_time", "max_value": 5000}, `+laps, "board global holds entries made as operator best, order desc")
	refused(`{"id": "global", "operator": "best", "period": "all_time", "max_value": 1000}, `+
		`{"id": "points", "operator": "incr", "period": "all_time", "max_value": 5000}, {"id": "xp", "operator": "set", "period": "all_time"}, `+
		`{"id": "laps", "operator": "best", "order": "asc", "period": "weekly", "min_value": 1}`, "board xp holds entries made as operator incr")
	refused(`{"id": "global", "operator": "best", "period": "daily", "max_value": 1000}, `+
		`{"id": "points", "operator": "incr", "period": "all_time", "max_value": 5000}, `+laps, "board global holds entries")
	refused(`{"id": "global", "operator": "best", "period": "all_time", "max_value": 1000}, `+
		`{"id": "points", "operator": "incr", "period": "all_time", "max_value": 5000}, {"id": "xp", "operator": "incr", "period": "all_time"}, `+
		`{"id": "laps", "operator": "best", "order": "asc", "period": "weekly", "min_value": 1}, {"id": "match", "operator": "incr", "period": "match", "server_only": true, "max_value": 2}`,
		"board match now takes values from 0 to 2, but 1 of its entries lie outside")
	refused(`{"id": "global", "operator": "best", "period": "all_time", "max_value": 500}, `+
		`{"id": "points", "operator": "incr", "period": "all_time", "max_value": 5000}, `+laps, "board global now takes values from 0 to 500, but 1 of its entries lie outside")

	// Wider bounds, a lower max still above every entry, and a board without entries
	// turned around: accepted, and the board's entries read as before.
	svc = env.start(file(`{"id": "global", "operator": "best", "period": "all_time", "max_value": 2000}, ` +
		`{"id": "points", "operator": "incr", "period": "all_time", "max_value": 200}, {"id": "xp", "operator": "incr", "period": "all_time"}, ` +
		`{"id": "laps", "operator": "best", "order": "desc", "period": "daily"}`))
	if r := svc.do(t, "GET", "/v1/boards/global/users/a", srv, ""); r.status != 200 || num(r.body["score"]) != 900 {
		t.Errorf("global after an accepted change: %d %s", r.status, r.raw)
	}
}

// TestBoardDefinitionsWaitForWaitingCommands: a board without entries keeps its operator,
// order and period while commands wait in the outbox: two increments accepted while no
// projector ran were applied as a set (the entry 3, not 8) when the service came back with
// the board turned into a set board. Such a start is refused; once the commands are
// applied, a board without entries changes again. Found by a review of what the API
// accepts and the projector then does.
func TestBoardDefinitionsWaitForWaitingCommands(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	dir := t.TempDir()
	file := func(boards string) map[string]string {
		path := filepath.Join(dir, "boards.json")
		if err := os.WriteFile(path, []byte(`{"boards": [{"id": "global", "operator": "best", "period": "all_time"}, `+boards+`]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		return map[string]string{"LEADERBOARD_BOARDS_FILE": path}
	}
	const before = `{"id": "fresh", "operator": "incr", "period": "all_time"}, {"id": "spare", "operator": "incr", "period": "all_time"}`
	api := file(before)
	api["LEADERBOARD_ROLES"] = "api"
	svc := env.start(api)
	srv := mintToken(t, "gs", "server")
	for i, delta := range []int{5, 3} {
		if r := svc.do(t, "POST", "/v1/boards/fresh/scores", srv, fmt.Sprintf(`{"value": %d, "user_id": "a", "event_id": "f-%d"}`, delta, i)); r.status != 202 {
			t.Fatalf("increment %d: %d %s", delta, r.status, r.raw)
		}
	}
	svc.stop(t)

	start := func(boards string) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return runWith(ctx, nil, env.getenv(file(boards)), &storagetest.SyncBuffer{}, time.Now)
	}
	const want = "board fresh was operator incr, order desc, period all_time and the file now says operator set"
	if err := start(`{"id": "fresh", "operator": "set", "period": "all_time"}, {"id": "spare", "operator": "incr", "period": "all_time"}`); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("start with fresh a set board while its increments wait: %v, want an error saying %q", err, want)
	}

	svc = env.start(file(before))
	eventually(t, 30*time.Second, func() string {
		if r := svc.do(t, "GET", "/v1/boards/fresh/users/a", srv, ""); r.status != 200 || num(r.body["score"]) != 8 {
			return fmt.Sprintf("fresh after the restart with its definition: %d %s, want 8", r.status, r.raw)
		}
		return ""
	})
	svc.stop(t)
	// A dead letter waits (an increment of spare's, say): a requeue after the change
	// would apply it by the new rules, so spare keeps its definition until it is gone.
	if _, err := env.db().Exec(context.Background(), `INSERT INTO dead_letters (uuid, event_id, payload, reason, topic, handler, subscriber)
		VALUES ('dl-1', 'dl-1', '{}', 'poison', 'leaderboard.score-events', 'apply-score', 'projector')`); err != nil {
		t.Fatal(err)
	}
	const spareSet = `{"id": "fresh", "operator": "incr", "period": "all_time"}, {"id": "spare", "operator": "set", "period": "all_time"}`
	if err := start(spareSet); err == nil || !strings.Contains(err.Error(), "board spare was operator incr") || !strings.Contains(err.Error(), "dead letters wait") {
		t.Fatalf("start with spare a set board while a dead letter waits: %v, want a refusal naming the dead letters", err)
	}
	if _, err := env.db().Exec(context.Background(), `DELETE FROM dead_letters`); err != nil {
		t.Fatal(err)
	}
	// Nothing waits now: spare, without entries, turns into a set board.
	svc = env.start(file(spareSet))
	if r := svc.do(t, "GET", "/v1/boards/fresh/users/a", srv, ""); r.status != 200 || num(r.body["score"]) != 8 {
		t.Errorf("fresh: %d %s, want 8", r.status, r.raw)
	}
}
