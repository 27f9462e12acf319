package main

import (
	"context"
	"fmt"
	"net/http"
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

// matchPoint is a match point the service acknowledged with 202.
type matchPoint struct {
	user, match, eventID string
	point                int64
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
	base := "http://" + env.vars["LEADERBOARD_HTTP_ADDR"]
	start := func(kafkaDir string) *process {
		return startProcess(t, env, map[string]string{"LEADERBOARD_KAFKA_DATA_DIR": kafkaDir, "LEADERBOARD_LOG_LEVEL": "info"}, base)
	}
	kill := func(p *process) { p.kill(syscall.SIGKILL) }

	var (
		mu     sync.Mutex
		acks   []acked
		points []matchPoint
		seq    atomic.Int64
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
		// A game server posts match points, retrying each with its event id until the
		// service answers, as a client must: across a crash a retry is the same command.
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			tok := mintToken(t, "game-server", "server")
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := matchPoint{user: fmt.Sprintf("mp-%d", i%4), match: fmt.Sprintf("crash-m-%d", i%3), eventID: fmt.Sprintf("mp-ev-%d", i), point: int64(1 + i%9)}
				for { // until acknowledged, even after stop: the point was sent
					req, _ := http.NewRequest(http.MethodPost, base+"/v1/matches/"+p.match+"/users/"+p.user+"/point",
						strings.NewReader(fmt.Sprintf(`{"point": %d, "event_id": %q}`, p.point, p.eventID)))
					req.Header.Set("Authorization", "Bearer "+tok)
					resp, err := client.Do(req)
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode == http.StatusAccepted {
							break
						}
					}
					time.Sleep(20 * time.Millisecond)
				}
				mu.Lock()
				points = append(points, p)
				mu.Unlock()
			}
		}()
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
		t.Fatalf("only %d writes acknowledged; log %s", len(acks), proc.log)
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
	if n := env.count(`SELECT count(*) - count(DISTINCT event_id) FROM score_history WHERE board_id = 'global'`); n != 0 {
		t.Fatalf("%d events applied twice", n)
	}
	if n := env.count(`SELECT count(*) FROM dead_letters`); n != 0 {
		t.Fatalf("%d dead letters after crashes", n)
	}
	rows, err := env.db().Query(ctx, `
		SELECT e.user_id, e.score, (SELECT max(value) FROM score_history h WHERE h.user_id = e.user_id)
		FROM board_entries e WHERE e.board_id = 'global' ORDER BY e.user_id`)
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
			if v := storedValue(t, env, "global", "all_time", user); !v.OK || v.Score != score {
				return fmt.Sprintf("redis %s = %+v, postgres %d", user, v, score)
			}
			return ""
		})
	}
	sort.Strings(users)
	if len(users) != len(best) {
		t.Fatalf("entries for %d users, acknowledged writes for %d", len(users), len(best))
	}
	checkMatchPoints(t, env, points)
	t.Logf("%d acknowledged writes for %d users and %d match points survived two SIGKILLs", len(acks), len(users), len(points))
}

// checkMatchPoints: every acknowledged match point is applied once to its match, the day
// and the season (three history rows), and each entry is the sum of the user's points,
// in PostgreSQL and in Redis.
func checkMatchPoints(t *testing.T, env *testEnv, points []matchPoint) {
	t.Helper()
	if len(points) < 10 {
		t.Fatalf("only %d match points acknowledged", len(points))
	}
	ctx := context.Background()
	ids := make([]string, len(points))
	match, total := map[string]int64{}, map[string]int64{}
	for i, p := range points {
		ids[i] = p.eventID
		match["match:"+p.match+" "+p.user] += p.point
		total[p.user] += p.point
	}
	eventually(t, 60*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM score_history WHERE event_id = ANY($1)`, ids); n != 3*len(ids) {
			return fmt.Sprintf("%d history rows for %d match points, want 3 each", n, len(ids))
		}
		return ""
	})
	rows, err := env.db().Query(ctx, `SELECT board_id, period, user_id, score, (SELECT sum(value) FROM score_history h
		WHERE h.board_id = e.board_id AND h.period = e.period AND h.user_id = e.user_id)
		FROM board_entries e WHERE e.user_id LIKE 'mp-%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int64{}
	days, seasons := map[string]int64{}, map[string]int64{}
	for rows.Next() {
		var board, period, user string
		var score, hist int64
		if err := rows.Scan(&board, &period, &user, &score, &hist); err != nil {
			t.Fatal(err)
		}
		if score != hist {
			t.Errorf("%s %s %s: entry %d, history sum %d", board, period, user, score, hist)
		}
		switch {
		case strings.HasPrefix(board, "match:"):
			got[board+" "+user] = score
		case board == "daily": // a run across midnight spreads over two days
			days[user] += score
		case board == "season":
			seasons[user] += score
		}
		eventually(t, 20*time.Second, func() string {
			if v := storedValue(t, env, board, period, user); !v.OK || v.Score != score {
				return fmt.Sprintf("redis %s %s %s = %+v, postgres %d", board, period, user, v, score)
			}
			return ""
		})
	}
	if fmt.Sprint(got) != fmt.Sprint(match) || fmt.Sprint(days) != fmt.Sprint(total) || fmt.Sprint(seasons) != fmt.Sprint(total) {
		t.Errorf("entries: matches %v days %v seasons %v; points sent: matches %v, per user %v", got, days, seasons, match, total)
	}
}
