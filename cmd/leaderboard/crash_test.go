package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// acked is a submission the service acknowledged with 202.
type acked struct {
	user, eventID string
	score         int64
}

// TestCrashLosesNothingAcknowledged kills the whole process (embedded broker included)
// with SIGKILL while clients write, restarts it on the same state, kills it again and
// restarts it with the broker's data gone: every acknowledged score is applied exactly
// once in PostgreSQL and Redis.
func TestCrashLosesNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary")
	}
	t.Parallel()
	env := newTestEnv(t)
	bin := filepath.Join(t.TempDir(), "leaderboard")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	logs, err := os.Create(filepath.Join(t.TempDir(), "service.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	base := "http://" + env.vars["LEADERBOARD_HTTP_ADDR"]

	start := func(kafkaDir string) *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Stdout, cmd.Stderr = logs, logs
		for k, v := range env.vars {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Env = append(cmd.Env, "LEADERBOARD_KAFKA_DATA_DIR="+kafkaDir, "LEADERBOARD_LOG_LEVEL=info")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if resp, err := http.Get(base + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return cmd
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("service not ready; log %s", logs.Name())
		return nil
	}
	kill := func(cmd *exec.Cmd) {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}

	var (
		mu   sync.Mutex
		acks []acked
		seq  atomic.Int64
	)
	// load writes improving scores for 40 users from 8 clients until stop is closed.
	load := func(stop <-chan struct{}) *sync.WaitGroup {
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := &http.Client{Timeout: 5 * time.Second}
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					user := fmt.Sprintf("crash-%02d", (w*5)+i%5)
					n := seq.Add(1)
					ev := fmt.Sprintf("crash-ev-%d", n)
					req, _ := http.NewRequest(http.MethodPost, base+"/v1/scores", strings.NewReader(fmt.Sprintf(`{"score": %d, "event_id": %q}`, n, ev)))
					req.Header.Set("Authorization", "Bearer "+mintToken(t, user))
					resp, err := client.Do(req)
					if err != nil {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusAccepted {
						mu.Lock()
						acks = append(acks, acked{user: user, eventID: ev, score: n})
						mu.Unlock()
					}
				}
			}()
		}
		return &wg
	}

	dir1 := filepath.Join(t.TempDir(), "kafka")
	proc := start(dir1)
	stop := make(chan struct{})
	wg := load(stop)
	time.Sleep(1500 * time.Millisecond)
	kill(proc) // 1: crash under load
	proc = start(dir1)
	time.Sleep(1500 * time.Millisecond)
	kill(proc) // 2: crash under load again, and lose the broker's data
	proc = start(filepath.Join(t.TempDir(), "kafka-new"))
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	defer kill(proc)

	mu.Lock()
	defer mu.Unlock()
	if len(acks) < 50 {
		t.Fatalf("only %d writes acknowledged; log %s", len(acks), logs.Name())
	}
	best := map[string]int64{}
	for _, a := range acks {
		best[a.user] = max(best[a.user], a.score)
	}
	ids := make([]string, len(acks))
	for i, a := range acks {
		ids[i] = a.eventID
	}
	ctx := context.Background()
	eventually(t, 60*time.Second, func() string {
		var applied int
		if err := env.db().QueryRow(ctx, `SELECT count(*) FROM score_history WHERE event_id = ANY($1)`, ids).Scan(&applied); err != nil {
			return err.Error()
		}
		if applied != len(ids) {
			return fmt.Sprintf("%d of %d acknowledged events applied", applied, len(ids))
		}
		return ""
	})
	// Exactly once: one history row per event; entries equal the best applied value.
	if n := env.count(`SELECT count(*) - count(DISTINCT event_id) FROM score_history`); n != 0 {
		t.Fatalf("%d events applied twice", n)
	}
	if n := env.count(`SELECT count(*) FROM dead_letters`); n != 0 {
		t.Fatalf("%d dead letters after crashes", n)
	}
	rows, err := env.db().Query(ctx, `
		SELECT e.user_id, e.score, (SELECT max(value) FROM score_history h WHERE h.user_id = e.user_id)
		FROM board_entries e ORDER BY e.user_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var users []string
	for rows.Next() {
		var user string
		var score, histMax int64
		if err := rows.Scan(&user, &score, &histMax); err != nil {
			t.Fatal(err)
		}
		users = append(users, user)
		if score != histMax || score < best[user] {
			t.Errorf("%s: entry %d, history max %d, best acknowledged %d", user, score, histMax, best[user])
		}
		eventually(t, 20*time.Second, func() string {
			h := env.rdb.HGet(ctx, env.prefix+":{global}:all_time:u", user).Val()
			if !strings.HasPrefix(h, fmt.Sprintf("%d|", score)) {
				return fmt.Sprintf("redis %s = %q, postgres %d", user, h, score)
			}
			return ""
		})
	}
	sort.Strings(users)
	if len(users) != len(best) {
		t.Fatalf("entries for %d users, acknowledged writes for %d", len(users), len(best))
	}
	t.Logf("%d acknowledged writes for %d users survived two SIGKILLs", len(acks), len(users))
}
