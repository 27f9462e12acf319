package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startRedisCluster starts three Redis masters from Debian's redis-server, joins them into
// a cluster, and returns their addresses; they are killed when the test ends.
func startRedisCluster(t *testing.T) []string {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not installed (make test installs it)")
	}
	var addrs []string
	for range 3 {
		port, dir := clusterPort(t), t.TempDir()
		cmd := exec.Command(server, "--port", port, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "5000",
			"--save", "", "--appendonly", "no", "--dir", dir)
		logs, err := os.Create(filepath.Join(dir, "redis.log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		addrs = append(addrs, "127.0.0.1:"+port)
	}
	for _, a := range addrs {
		waitTCP(t, a)
	}
	out, err := exec.Command("redis-cli", append([]string{"--cluster", "create"}, append(addrs, "--cluster-replicas", "0", "--cluster-yes")...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("create the cluster: %v\n%s", err, out)
	}
	ctx := context.Background()
	eventually(t, 30*time.Second, func() string {
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.ClusterInfo(ctx).Result()
			c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return fmt.Sprintf("%s: %v %.40s", a, err, info)
			}
		}
		return ""
	})
	return addrs
}

// clusterPort is a free port whose cluster bus port (port + 10000) is free too and below
// the ephemeral range. The bus port is marked given, so freePort never hands it to a
// parallel test.
func clusterPort(t *testing.T) string {
	t.Helper()
	for range 100 {
		p := freePort(t)
		n, _ := strconv.Atoi(p)
		bus := n + 10000
		if bus >= 32768 {
			continue
		}
		portsGiven.Lock()
		taken := portsGiven.m[bus]
		if !taken {
			if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", bus)); err == nil {
				ln.Close()
				portsGiven.m[bus] = true
				portsGiven.Unlock()
				return p
			}
		}
		portsGiven.Unlock()
	}
	t.Fatal("no free port pair for a Redis Cluster node")
	return ""
}

// clusterBoards are the boards of the cluster test: one of each period kind.
const clusterBoards = `{"boards": [
	{"id": "global", "operator": "best", "period": "all_time"},
	{"id": "points", "operator": "incr", "period": "all_time", "max_delta": 100, "action_cooldown": 30},
	{"id": "daily", "operator": "incr", "period": "daily", "server_only": true, "match_points": true},
	{"id": "season", "operator": "incr", "period": "season", "server_only": true, "match_points": true},
	{"id": "match", "operator": "incr", "period": "match", "server_only": true},
	{"id": "fastest", "operator": "best", "order": "asc", "period": "weekly", "min_value": 1}
]}`

// TestRedisCluster runs the service against a three-master Redis Cluster: writes to every
// kind of board, reads of every shape, the limiter and cooldowns, a ban, a rebuild and a
// consistency check all work, and the boards spread over the masters.
func TestRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	t.Parallel()
	addrs := startRedisCluster(t)
	env := newTestEnv(t)
	file := filepath.Join(t.TempDir(), "boards.json")
	if err := os.WriteFile(file, []byte(clusterBoards), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := env.start(map[string]string{"LEADERBOARD_REDIS_CLUSTER_ADDRS": strings.Join(addrs, ","), "LEADERBOARD_BOARDS_FILE": file,
		"LEADERBOARD_RATE_LIMIT": "10/600s"})
	srv, admin, viewer := mintToken(t, "gs", "server"), mintToken(t, "ops", "admin"), mintToken(t, "viewer")
	must := func(status int, method, path, tok, body string) response {
		t.Helper()
		r := svc.do(t, method, path, tok, body)
		if r.status != status {
			t.Fatalf("%s %s %s: %d %s, want %d", method, path, body, r.status, r.raw, status)
		}
		return r
	}
	for i := 1; i <= 6; i++ {
		u := fmt.Sprintf("c%d", i)
		must(200, "POST", "/v1/boards/global/scores?wait=true", srv, fmt.Sprintf(`{"value": %d, "user_id": %q}`, 100*i, u))
		must(200, "POST", "/v1/boards/fastest/scores?wait=true", srv, fmt.Sprintf(`{"value": %d, "user_id": %q}`, 1000-i, u))
		must(200, "POST", fmt.Sprintf("/v1/matches/m-%d/users/%s/point?wait=true", i%2, u), srv, fmt.Sprintf(`{"point": %d}`, i))
	}
	if got := entryOrder(t, must(200, "GET", "/v1/boards/global/top", viewer, "")); got != "c6:600 c5:500 c4:400 c3:300 c2:200 c1:100" {
		t.Errorf("global: %s", got)
	}
	// The write path's read of the entry (a script on three of the period's keys) answers
	// a score that does not beat it: on a cluster only if the keys share a slot.
	if r := must(200, "POST", "/v1/boards/global/scores", srv, `{"value": 50, "user_id": "c1"}`); r.body["status"] != "unchanged" {
		t.Errorf("a lower best score: %s, want 200 unchanged", r.raw)
	}
	if got := entryOrder(t, must(200, "GET", "/v1/boards/fastest/entries?size=10", viewer, "")); !strings.HasPrefix(got, "c6:994 c5:995") {
		t.Errorf("fastest: %s", got)
	}
	if r := must(200, "GET", "/v1/boards/global/users/c3?around=1", viewer, ""); len(r.body["around"].([]any)) != 3 || num(r.body["rank"]) != 4 {
		t.Errorf("around: %s", r.raw)
	}
	if r := must(200, "GET", "/v1/boards/global/users?ids=c1,c6", viewer, ""); len(r.body["entries"].([]any)) != 2 {
		t.Errorf("friends: %s", r.raw)
	}
	if r := must(200, "GET", "/v1/match-leaderboard/m-1/score", viewer, ""); len(r.body["rankings"].([]any)) != 3 {
		t.Errorf("match: %s", r.raw)
	}
	if r := must(200, "GET", "/v1/daily-leaderboard/users/c6", viewer, ""); num(r.body["point"]) != 6 || num(r.body["ranking"]) != 1 {
		t.Errorf("day: %s", r.raw)
	}
	// The limiter and the cooldowns keep their keys on the cluster too.
	player := mintToken(t, "limited")
	for i := 1; i <= 10; i++ {
		must(202, "POST", "/v1/scores", player, fmt.Sprintf(`{"score": %d}`, i))
	}
	must(429, "POST", "/v1/scores", player, `{"score": 11}`)
	inc := func(event string) string {
		return fmt.Sprintf(`{"user_id": "limited", "delta": 1, "event_id": %q, "timestamp": %q, "action_id": "quest"}`, event, time.Now().UTC().Format(time.RFC3339))
	}
	must(429, "POST", "/v1/scores/increment", mintToken(t, "limited"), inc("x")) // still rate-limited
	must(202, "POST", "/v1/scores/increment", srv, inc("q-1"))
	must(429, "POST", "/v1/scores/increment", srv, inc("q-2"))
	// The limited player's best (its writes were answered 202, not waited for) is applied
	// before the consistency check compares PostgreSQL and Redis.
	eventually(t, 20*time.Second, func() string {
		if r := svc.do(t, "GET", "/v1/boards/global/users/limited", viewer, ""); r.status != 200 || num(r.body["score"]) != 10 {
			return "limited's best: " + r.raw
		}
		return ""
	})
	// A ban, a rebuild and a consistency check.
	must(200, "POST", "/admin/users/c6/ban?wait=true", admin, `{"reason": "test"}`)
	if got := entryOrder(t, must(200, "GET", "/v1/boards/global/top", viewer, "")); strings.Contains(got, "c6") {
		t.Errorf("after the ban: %s", got)
	}
	// 200 more entries, in PostgreSQL only: the rebuild loads them into several buckets
	// (keys the scripts find themselves, in the board's slot), and writes find them there.
	if _, err := env.db().Exec(context.Background(), `
		INSERT INTO board_entries (board_id, period, user_id, score, sort_key, version, reached_at, updated_at)
		SELECT 'global', 'all_time', 'bulk-' || i, i, i, 1, now(), now() FROM generate_series(1, 200) AS i`); err != nil {
		t.Fatal(err)
	}
	must(200, "POST", "/admin/boards/global/rebuild", admin, "")
	must(200, "POST", "/v1/boards/global/scores?wait=true", srv, `{"value": 5000, "user_id": "bulk-7"}`)
	if r := must(200, "GET", "/v1/boards/global/users/bulk-7", viewer, ""); num(r.body["rank"]) != 1 || num(r.body["score"]) != 5000 {
		t.Errorf("bulk-7 after its write: %s", r.raw)
	}
	if r := must(200, "GET", "/admin/consistency?board=global&mode=full", admin, ""); r.body["consistent"] != true || num(r.body["redis_entries"]) < 205 {
		t.Errorf("consistency: %s", r.raw)
	}
	stream := svc.mustStream(t, "board=global&token="+url.QueryEscape(svc.realtimeToken(t, viewer)), "")
	eventually(t, 10*time.Second, func() string {
		if len(stream.named("leaderboard.updated")) == 0 {
			return "no snapshot on the stream"
		}
		return ""
	})
	// The boards spread over the masters.
	used := 0
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		if n, _ := c.DBSize(context.Background()).Result(); n > 0 {
			used++
		}
		c.Close()
	}
	if used < 2 {
		t.Errorf("the keys live on %d of 3 masters", used)
	}
	if r := svc.do(t, http.MethodGet, "/readyz", "", ""); r.status != 200 {
		t.Errorf("readyz: %d %s", r.status, r.raw)
	}
}
