package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestClusterRetryRefundsAndReleases: on a Redis Cluster, a retry gives back the
// rate budgets its write spent (the user's and the board's, whose keys live on different
// slots), and a retry naming another action gives back that action's cooldown lock:
// through the real service, as README's "A retry spends none of the rate limit" has it on
// a single Redis. Refund and Release errors are only logged, so the budgets and the lock
// are checked by the writes that follow. Then every script cache is flushed and it holds
// again (NOSCRIPT, then EVAL, on each master).
func TestClusterRetryRefundsAndReleases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	t.Parallel()
	addrs := startRedisCluster(t)
	env := newTestEnv(t)
	file := filepath.Join(t.TempDir(), "boards.json")
	if err := os.WriteFile(file, []byte(`{"boards": [
		{"id": "global", "operator": "best", "period": "all_time"},
		{"id": "limited", "operator": "best", "period": "all_time", "rate_limit": "2/600s"},
		{"id": "points", "operator": "incr", "period": "all_time", "max_delta": 100, "action_cooldown": 60}
	]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := env.start(map[string]string{"LEADERBOARD_REDIS_CLUSTER_ADDRS": strings.Join(addrs, ","), "LEADERBOARD_BOARDS_FILE": file,
		"LEADERBOARD_RATE_LIMIT": "3/600s"})
	ctx := context.Background()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cluster.Close() })
	flush := func() {
		t.Helper()
		if err := cluster.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }); err != nil {
			t.Fatal(err)
		}
	}
	srv := mintToken(t, "gs", "server")
	expect := func(status int, method, path, tok, body string) response {
		t.Helper()
		r := svc.do(t, method, path, tok, body)
		if r.status != status {
			t.Fatalf("%s %s %s: %d %s (Retry-After %q), want %d", method, path, body, r.status, r.raw, r.header.Get("Retry-After"), status)
		}
		return r
	}

	for round, user := range []string{"rr", "rs"} {
		if round == 1 {
			flush()
		}
		player := mintToken(t, user)
		// The user's budget (3) and the board's (2): a write and two retries of it spend one
		// of each; two more writes of the board would be one too many.
		write := func(status int, event string, value int) {
			t.Helper()
			expect(status, "POST", "/v1/boards/limited/scores?wait=true", player, fmt.Sprintf(`{"value": %d, "event_id": %q}`, value, event))
		}
		write(200, "w-1", 100)
		if round == 1 {
			flush()
		}
		write(200, "w-1", 100) // retries: answered as the first time, their spending given back
		write(200, "w-1", 100)
		write(200, "w-2", 200) // the board's second write
		r := expect(429, "POST", "/v1/boards/limited/scores?wait=true", player, `{"value": 300, "event_id": "w-3"}`)
		if !strings.Contains(r.raw, "more than 2") {
			t.Errorf("%s: the third write refused for another budget than the board's: %s", user, r.raw)
		}
		// The user's budget: w-1, w-2 and the refused w-3 (it spent the user's before the
		// board refused it) are its 3; a retry of w-1 over the budget still passes.
		write(200, "w-1", 100)
		expect(429, "POST", "/v1/boards/global/scores?wait=true", player, `{"value": 1, "event_id": "g-1"}`)

		// Cooldowns: a retry of q-1 naming another action takes that action's lock and, the
		// event being q-1's, gives it back; q-2 may then take it.
		inc := func(event, action string) string {
			return fmt.Sprintf(`{"user_id": %q, "delta": 1, "event_id": %q, "timestamp": %q, "action_id": %q}`, user, event, time.Now().UTC().Format(time.RFC3339), action)
		}
		expect(200, "POST", "/v1/scores/increment?wait=true", srv, inc("q-1", "quest"))
		if round == 1 {
			flush()
		}
		if r := svc.do(t, "POST", "/v1/scores/increment?wait=true", srv, inc("q-1", "quest2")); r.status != 200 && r.status != 409 {
			t.Fatalf("%s: the retry naming another action: %d %s", user, r.status, r.raw)
		}
		expect(429, "POST", "/v1/scores/increment?wait=true", srv, inc("q-9", "quest")) // quest's lock is q-1's
		expect(200, "POST", "/v1/scores/increment?wait=true", srv, inc("q-2", "quest2"))
		expect(429, "POST", "/v1/scores/increment?wait=true", srv, inc("q-3", "quest2"))
	}
	if logs := svc.logs.String(); strings.Contains(logs, "refund rate budget") || strings.Contains(logs, "release cooldown") {
		t.Errorf("a refund or release failed:\n%s", logs)
	}
}
