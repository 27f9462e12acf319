package main

import (
	"context"
	"net/http"
	"net/url"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestReadsGoOnWhileRedisRefusesWrites: a Redis full at its maxmemory (noeviction, which
// the mirror needs) or whose snapshots fail (a full disk: stop-writes-on-bgsave-error)
// answers reads and refuses writes. A page after a cursor writes (its script marks the
// cursor's place) and a read of a period Redis lost loads it: both answered 503 while the
// board's other reads answered 200 (found by a review). They are now answered from
// PostgreSQL, marked degraded, as while Redis is down. (maxmemory 1 byte: every write is
// over it, whatever Redis frees meanwhile.)
func TestReadsGoOnWhileRedisRefusesWrites(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"maxmemory", "misconf"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			server, err := exec.LookPath("redis-server")
			if err != nil {
				t.Fatal("redis-server not installed (make test installs it)")
			}
			port := freePort(t)
			args := []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}
			if how == "misconf" { // snapshots can never be written: /proc takes no file
				args = append(args, "--save", "3600 1", "--dir", "/proc")
			}
			cmd := exec.Command(server, args...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			addr := "127.0.0.1:" + port
			waitTCP(t, addr)
			rc := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = rc.Close() })

			env := newTestEnv(t)
			svc := env.start(map[string]string{"LEADERBOARD_REDIS_URL": "redis://" + addr + "/0"})
			viewer := mintToken(t, "viewer")
			for i, u := range []string{"a", "b", "c", "d"} {
				writeAs(t, svc, "global", u, 10-i)
			}
			writeAs(t, svc, "points", "a", 5)
			first := svc.do(t, http.MethodGet, "/v1/boards/global/entries?size=2", viewer, "")
			cursor, _ := first.body["next_cursor"].(string)
			if first.status != 200 || cursor == "" {
				t.Fatalf("first page: %d %s", first.status, first.raw)
			}

			ctx := context.Background()
			// Redis loses the period of points (as an expiry would): its next read loads it.
			if n, err := rc.Del(ctx, env.prefix+":{points}:all_time:top").Result(); err != nil || n != 1 {
				t.Fatalf("drop the top of points: %d %v", n, err)
			}
			if how == "maxmemory" {
				if err := rc.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				rc.BgSave(ctx)
			}
			eventually(t, 10*time.Second, func() string {
				if err := rc.Set(ctx, "probe", "1", 0).Err(); err == nil {
					return "Redis still takes writes"
				}
				return ""
			})
			if r := svc.do(t, http.MethodGet, "/v1/boards/global/top", viewer, ""); r.status != 200 || r.header.Get("X-Leaderboard-Degraded") != "" {
				t.Errorf("top while Redis refuses writes: %d degraded %q, want 200 from Redis", r.status, r.header.Get("X-Leaderboard-Degraded"))
			}
			r := svc.do(t, http.MethodGet, "/v1/boards/global/entries?size=2&cursor="+url.QueryEscape(cursor), viewer, "")
			if r.status != 200 || r.header.Get("X-Leaderboard-Degraded") != "redis-unavailable" || rankOrder(t, r, "entries") != "3:c:8 4:d:7" {
				t.Errorf("the page after a cursor while Redis refuses writes: %d degraded %q %s, want 200 from PostgreSQL (3:c:8 4:d:7)",
					r.status, r.header.Get("X-Leaderboard-Degraded"), r.raw)
			}
			if r := svc.do(t, http.MethodGet, "/v1/boards/points/top", viewer, ""); r.status != 200 || r.header.Get("X-Leaderboard-Degraded") != "redis-unavailable" || rankOrder(t, r, "entries") != "1:a:5" {
				t.Errorf("top of a period Redis lost, while it refuses writes: %d degraded %q %s, want 200 from PostgreSQL", r.status, r.header.Get("X-Leaderboard-Degraded"), r.raw)
			}
		})
	}
}
