package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestRebuildAfterRedisLoss: after the board's Redis keys are lost (FLUSHALL, scoped to
// this test's prefix), a rebuild under concurrent writes restores the board exactly as
// PostgreSQL has it; the consistency check sees the loss and the recovery, over HTTP and
// as a CLI subcommand.
func TestRebuildAfterRedisLoss(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	admin := mintToken(t, "ops", "admin")
	srv := mintToken(t, "game-server", "server")
	for i := range 30 {
		if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", mintToken(t, fmt.Sprintf("rb-%02d", i)), fmt.Sprintf(`{"score": %d}`, 1000+i%7)); r.status != 200 {
			t.Fatalf("submit: %d %s", r.status, r.raw)
		}
	}
	check := func() map[string]any {
		r := svc.do(t, http.MethodGet, "/admin/consistency?board=global&mode=full", admin, "")
		if r.status != 200 {
			t.Fatalf("consistency: %d %s", r.status, r.raw)
		}
		return r.body
	}
	if rep := check(); rep["consistent"] != true || num(rep["checked"]) != 30 {
		t.Fatalf("before the loss: %v", rep)
	}
	before := svc.do(t, http.MethodGet, "/v1/leaderboard/top?limit=100", admin, "")

	ctx := context.Background()
	iter := env.rdb.Scan(ctx, 0, env.prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		env.rdb.Del(ctx, iter.Val())
	}
	if rep := check(); rep["consistent"] != false || num(rep["missing_in_redis"]) != 30 {
		t.Fatalf("after the loss: %v", rep)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"consistency", "-full"}, env.getenv(nil), &out); err == nil {
		t.Fatalf("consistency CLI found no difference after the loss:\n%s", out.String())
	}

	// Writes keep flowing while the board is rebuilt.
	var wg sync.WaitGroup
	accepted := make(chan int, 1)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		n := 0
		for i := 0; ; i++ {
			select {
			case <-stop:
				accepted <- n
				return
			default:
			}
			body := fmt.Sprintf(`{"score": %d, "user_id": "rb-%02d"}`, 2000+i, i%40)
			if r := svc.submit(t, srv, body); r.status == 202 {
				n++
			}
		}
	}()
	// Stop the writer before the service stops, also when the test fails.
	stopWriter := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopWriter)
	// The rebuild starts once a concurrent write has been applied, so its version must
	// be above the one clients saw before the loss.
	eventually(t, 20*time.Second, func() string {
		if h := env.count(`SELECT count(*) FROM score_history`); h <= 30 {
			return fmt.Sprintf("history %d: no concurrent write applied yet", h)
		}
		return ""
	})
	r := svc.do(t, http.MethodPost, "/admin/boards/global/rebuild", admin, "")
	if r.status != 200 || num(r.body["entries"]) < 30 || num(r.body["version"]) <= num(before.body["version"]) {
		t.Fatalf("rebuild: %d %s (version before %d)", r.status, r.raw, num(before.body["version"]))
	}
	time.Sleep(300 * time.Millisecond)
	stopWriter()
	n := <-accepted
	if n == 0 {
		t.Fatal("no writes during the rebuild")
	}
	eventually(t, 20*time.Second, func() string {
		if h := env.count(`SELECT count(*) FROM score_history`); h != 30+n {
			return fmt.Sprintf("history %d, want %d", h, 30+n)
		}
		if rep := check(); rep["consistent"] != true {
			return fmt.Sprintf("after the rebuild: %v", rep)
		}
		return ""
	})
	out.Reset()
	if err := run(ctx, []string{"consistency", "-full"}, env.getenv(nil), &out); err != nil {
		t.Fatalf("consistency CLI after the rebuild: %v\n%s", err, out.String())
	}
	out.Reset()
	entries := env.count(`SELECT count(*) FROM board_entries`)
	if err := run(ctx, []string{"rebuild", "-board", "global"}, env.getenv(nil), &out); err != nil || !bytes.Contains(out.Bytes(), []byte(fmt.Sprintf(`"entries": %d`, entries))) {
		t.Fatalf("rebuild CLI: %v\n%s", err, out.String())
	}
	for _, c := range []struct {
		method, path, tok string
		status            int
	}{
		{"POST", "/admin/boards/global/rebuild", srv, 403},
		{"GET", "/admin/consistency", srv, 403},
		{"POST", "/admin/boards/nope/rebuild", admin, 404},
		{"GET", "/admin/consistency?board=nope", admin, 404},
		{"GET", "/admin/consistency?mode=quick", admin, 400},
	} {
		if r := svc.do(t, c.method, c.path, c.tok, ""); r.status != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, r.status, c.status)
		}
	}
}

// TestRebuildReachesOpenStreams: Redis got a board wrong (here a ghost entry no
// PostgreSQL row backs, as a mirror bug would leave it), and the live top showed it on
// the open realtime streams. The admin rebuilds the board from PostgreSQL: the repaired
// top, with a new version, reaches the open streams (the process that rebuilt pushes it
// at once, TestRebuildPushesThisProcesssStreams; every process's refresh round takes it
// within 5 s, TestHubRefreshAllPublishesATopSwappedInWithoutNotification). A rebuild
// published nothing: every browser showed the ghost until a write changed the top.
func TestRebuildReachesOpenStreams(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	admin := mintToken(t, "ops", "admin")
	alice := mintToken(t, "alice")
	mustApply(t, svc, alice, `{"score": 50}`)
	mustApply(t, svc, mintToken(t, "bob"), `{"score": 40}`)
	c := svc.mustStream(t, "board=global&token="+svc.realtimeToken(t, alice), "")

	// Redis gets the board wrong: a ghost entry above everyone.
	boards := storage.NewBoards(env.rdb, env.prefix, 100)
	now := time.Now().UTC()
	res := boards.ApplyAll(context.Background(), []storage.MirrorGroup{{
		Target: storage.Target{Board: "global", Period: "all_time"},
		States: []storage.EntryState{{Board: "global", Period: "all_time", UserID: "ghost", Score: 999999, SortKey: 999999, Version: 1, ReachedAt: now, UpdatedAt: now}},
	}}, nil)
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	// A later write changes the top: the streams get it, ghost included.
	mustApply(t, svc, mintToken(t, "carol"), `{"score": 30}`)
	first := func() string {
		ups := c.named("leaderboard.updated")
		if len(ups) == 0 {
			return ""
		}
		entries, _ := ups[len(ups)-1].data["entries"].([]any)
		if len(entries) == 0 {
			return ""
		}
		return fmt.Sprint(entries[0].(map[string]any)["user_id"])
	}
	eventually(t, 20*time.Second, func() string {
		if f := first(); f != "ghost" {
			return "stream's first: " + f
		}
		return ""
	})

	r := svc.do(t, http.MethodPost, "/admin/boards/global/rebuild", admin, "")
	if r.status != 200 {
		t.Fatalf("rebuild: %d %s", r.status, r.raw)
	}
	top := svc.do(t, http.MethodGet, "/v1/leaderboard/top", alice, "")
	if !strings.Contains(top.raw, `"alice"`) || strings.Contains(top.raw, "ghost") {
		t.Fatalf("top after the rebuild: %s", top.raw)
	}
	deadline := time.Now().Add(15 * time.Second) // the push, or at worst a refresh round (every 5 s)
	for time.Now().Before(deadline) && (first() == "ghost" || c.lastVersion() != num(top.body["version"])) {
		time.Sleep(100 * time.Millisecond)
	}
	if f := first(); f != "alice" || c.lastVersion() != num(top.body["version"]) {
		t.Errorf("15 s after the rebuild the open stream still shows %q first at version %d; the board's top is version %d with alice first", f, c.lastVersion(), num(top.body["version"]))
	}
}

// TestRebuildOfAMatchNeverPlayedIsNotFound: a match that never had a point
// is 404 unknown_board on every read and on the stream (openapi: "A match board without
// any entry is 404 unknown_board"; the stream: "a match without a point yet, is 404
// unknown_board"). An admin's rebuild of such a match must not change that: it is refused
// 404 unknown_board (NotFound is in the rebuild's answers) and leaves no Redis keys (it
// once answered 200 and wrote the match's keys, and every read then found the match).
func TestRebuildOfAMatchNeverPlayedIsNotFound(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	player := mintToken(t, "alice")
	admin := mintToken(t, "ops", "admin")
	rt := svc.realtimeToken(t, player)

	if r := svc.do(t, http.MethodGet, "/v1/boards/match:ghost/top", player, ""); r.status != 404 || r.body["error_code"] != "unknown_board" {
		t.Fatalf("before: GET top of a match never played: %d %s, want 404 unknown_board", r.status, r.raw)
	}
	r := svc.do(t, http.MethodPost, "/admin/boards/match:ghost/rebuild", admin, "")
	if r.status != 404 || r.body["error_code"] != "unknown_board" {
		t.Errorf("POST /admin/boards/match:ghost/rebuild of a match never played: %d %s, want 404 unknown_board", r.status, r.raw)
	}
	keys, err := env.rdb.Keys(context.Background(), env.prefix+"*match:ghost*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("the refused rebuild left Redis keys of the ghost match: %v", keys)
	}
	for _, path := range []string{
		"/v1/boards/match:ghost/top",
		"/v1/match-leaderboard/ghost/score",
		"/v1/boards/match:ghost/entries",
		"/v1/boards/match:ghost/users?ids=alice",
	} {
		if r := svc.do(t, http.MethodGet, path, player, ""); r.status != 404 || r.body["error_code"] != "unknown_board" {
			t.Errorf("after the rebuild: GET %s: %d %s, want 404 unknown_board", path, r.status, r.raw)
		}
	}
	if got := probeStatus(t, svc, "/v1/realtime/leaderboard?board=match:ghost&token="+rt); got != 404 {
		t.Errorf("after the rebuild: the stream of the ghost match answered %d, want 404 unknown_board", got)
	}
}

// probeStatus opens a GET and returns its status without reading a stream's body.
func probeStatus(t *testing.T, s *service, path string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}
