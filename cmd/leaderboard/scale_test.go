package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// binary is the service built once for the tests that run it as separate processes.
var binary struct {
	once sync.Once
	path string
	err  error
}

// TestMain removes the binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binary.path != "" {
		os.RemoveAll(filepath.Dir(binary.path))
	}
	os.Exit(code)
}

// serviceBinary builds cmd/leaderboard once per test run.
func serviceBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "leaderboard-bin-")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "leaderboard")
		if out, err := exec.Command("go", "build", "-o", binary.path, ".").CombinedOutput(); err != nil {
			binary.err = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// process is the service (or its broker) running as a process of its own.
type process struct {
	cmd  *exec.Cmd
	base string
	log  string
}

// startProcess runs the binary with args and the env's variables plus vars; ready, when
// set, is waited for (an HTTP base URL whose /readyz must answer 200).
func startProcess(t *testing.T, env *testEnv, vars map[string]string, ready string, args ...string) *process {
	t.Helper()
	logFile, err := os.CreateTemp(t.TempDir(), "process-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(serviceBinary(t), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	for k, v := range env.vars {
		if _, ok := vars[k]; !ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, base: ready, log: logFile.Name()}
	t.Cleanup(func() { p.kill(syscall.SIGKILL) })
	if ready == "" {
		return p
	}
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(ready + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	logs, _ := os.ReadFile(logFile.Name())
	t.Fatalf("process %v not ready:\n%s", args, logs)
	return nil
}

// kill signals the process and waits for it.
func (p *process) kill(sig syscall.Signal) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	_ = p.cmd.Wait()
}

// writer posts best scores and, every other command, increments of the points board from
// a server token for users until stopped, retrying each with its event id until the
// service answers, and records what was acknowledged: an increment applied twice, or
// lost, changes its user's total.
type writer struct {
	mu     sync.Mutex
	acks   map[string]int64 // event id -> score
	best   map[string]int64 // user -> best acknowledged score
	points map[string]int64 // user -> acknowledged increments (of 1)
	seq    atomic.Int64
	stop   chan struct{}
	done   sync.WaitGroup
	client *http.Client
}

func startWriter(t *testing.T, base func() string, clients int) *writer {
	t.Helper()
	w := &writer{acks: map[string]int64{}, best: map[string]int64{}, points: map[string]int64{}, stop: make(chan struct{}), client: &http.Client{Timeout: 5 * time.Second}}
	tok := mintToken(t, "game-server", "server")
	for c := range clients {
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			for i := 0; ; i++ {
				select {
				case <-w.stop:
					return
				default:
				}
				n := w.seq.Add(1)
				user, ev := fmt.Sprintf("w-%d-%d", c, i%7), fmt.Sprintf("w-ev-%d", n)
				incr := n%2 == 0
				path, body := "/v1/scores", fmt.Sprintf(`{"score": %d, "event_id": %q, "user_id": %q}`, n, ev, user)
				if incr {
					path, body = "/v1/boards/points/scores", fmt.Sprintf(`{"value": 1, "event_id": %q, "user_id": %q}`, ev, user)
				}
				for { // the same command until acknowledged, even after stop
					req, _ := http.NewRequest(http.MethodPost, base()+path, strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+tok)
					resp, err := w.client.Do(req)
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode == http.StatusAccepted {
							break
						}
					}
					time.Sleep(50 * time.Millisecond)
				}
				w.mu.Lock()
				w.acks[ev] = n
				if incr {
					w.points[user]++
				} else {
					w.best[user] = max(w.best[user], n)
				}
				w.mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	return w
}

// finish stops the writer and returns how many writes were acknowledged.
func (w *writer) finish() int {
	close(w.stop)
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acks)
}

// checkExactlyOnce waits until every acknowledged write is applied, then checks each is
// in the history, every global entry is the best acknowledged score and every points
// entry the count of acknowledged increments (one applied twice or lost shows there), in
// PostgreSQL and in Redis (read through base).
func (w *writer) checkExactlyOnce(t *testing.T, env *testEnv, base func() string, within time.Duration) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]string, 0, len(w.acks))
	for id := range w.acks {
		ids = append(ids, id)
	}
	eventually(t, within, func() string {
		if n := env.count(`SELECT count(*) FROM score_history WHERE event_id = ANY($1)`, ids); n != len(ids) {
			return fmt.Sprintf("%d of %d acknowledged writes applied", n, len(ids))
		}
		return ""
	})
	viewer := mintToken(t, "viewer")
	type want struct {
		board, user string
		score       int64
	}
	var wants []want
	for user, best := range w.best {
		wants = append(wants, want{"global", user, best})
	}
	for user, n := range w.points {
		wants = append(wants, want{"points", user, n})
	}
	for _, wt := range wants {
		board, user, best := wt.board, wt.user, wt.score
		if n := env.count(`SELECT score FROM board_entries WHERE board_id = $1 AND user_id = $2`, board, user); int64(n) != best {
			t.Errorf("%s on %s: PostgreSQL has %d, acknowledged %d", user, board, n, best)
		}
		eventually(t, 20*time.Second, func() string {
			req, _ := http.NewRequest(http.MethodGet, base()+"/v1/boards/"+board+"/users/"+user, nil)
			req.Header.Set("Authorization", "Bearer "+viewer)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err.Error()
			}
			defer resp.Body.Close()
			if resp.Header.Get("X-Leaderboard-Degraded") != "" || resp.StatusCode != 200 {
				return fmt.Sprintf("%s: %d", user, resp.StatusCode)
			}
			var body struct{ Score int64 }
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Score != best {
				return fmt.Sprintf("%s on %s: Redis has %d, want %d (%v)", user, board, body.Score, best, err)
			}
			return ""
		})
	}
}

// TestBacklogRefusesWrites: past LEADERBOARD_MAX_BACKLOG accepted commands waiting for the
// pipeline, writes are refused with 503 backlog_full and Retry-After; what was accepted is
// applied, what was refused never; once the pipeline caught up, writes are taken again.
func TestBacklogRefusesWrites(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(map[string]string{
		"LEADERBOARD_MAX_BACKLOG": "20", "LEADERBOARD_RELAY_THROTTLE": "10/1s", "LEADERBOARD_OUTBOX_PRUNE_INTERVAL": "200ms",
	})
	srv := mintToken(t, "gs", "server")
	accepted, refused := map[string]bool{}, []string{}
	for i := 0; len(refused) < 3 && i < 500; i++ {
		ev := fmt.Sprintf("bl-%d", i)
		r := svc.submit(t, srv, fmt.Sprintf(`{"score": %d, "user_id": "bl-%d", "event_id": %q}`, i+1, i, ev))
		switch {
		case r.status == 202:
			accepted[ev] = true
		case r.status == 503 && r.body["error_code"] == "backlog_full" && r.header.Get("Retry-After") != "":
			refused = append(refused, ev)
		default:
			t.Fatalf("write %d: %d %s", i, r.status, r.raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(refused) == 0 || len(accepted) < 20 {
		t.Fatalf("%d accepted, %d refused: the backlog never filled", len(accepted), len(refused))
	}
	eventually(t, 60*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM score_history WHERE event_id LIKE 'bl-%'`); n != len(accepted) {
			return fmt.Sprintf("%d of %d accepted writes applied", n, len(accepted))
		}
		return ""
	})
	if n := env.count(`SELECT count(*) FROM score_history WHERE event_id = ANY($1)`, refused); n != 0 {
		t.Errorf("%d refused writes applied", n)
	}
	eventually(t, 20*time.Second, func() string {
		if r := svc.submit(t, srv, `{"score": 1, "user_id": "after"}`); r.status != 202 {
			return fmt.Sprintf("after the catch-up: %d %s", r.status, r.raw)
		}
		return ""
	})
	metricsShow(t, svc, `leaderboard_write_refusals_total{reason="backlog_full"}`)
}

// TestBrokerOutage: an external Kafka-protocol broker stops for 30 s under load and comes
// back on the same data: writes keep being accepted, the backlog drains, every
// acknowledged write is applied exactly once.
func TestBrokerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("stops a broker for 30 s")
	}
	t.Parallel()
	env := newTestEnv(t)
	brokerAddr, dataDir := "127.0.0.1:"+freePort(t), t.TempDir()
	brokerArgs := []string{"broker", "-addr", brokerAddr, "-data-dir", dataDir}
	kafka := startProcess(t, env, nil, "", brokerArgs...)
	waitTCP(t, brokerAddr)
	svc := env.start(map[string]string{"LEADERBOARD_KAFKA_BROKERS": brokerAddr})
	base := func() string { return svc.base }
	w := startWriter(t, base, 4)
	time.Sleep(2 * time.Second)
	kafka.kill(syscall.SIGTERM)
	during := w.seq.Load()
	time.Sleep(30 * time.Second)
	if got := w.seq.Load() - during; got < 50 {
		t.Fatalf("only %d writes went out while the broker was down: writes must keep being accepted", got)
	}
	// An API process started while Kafka is down (a restart, a scale-up): it starts, is
	// ready (startProcess waits for /readyz), and accepts writes, which are applied once
	// the broker is back; its notifier connects then and feeds its streams.
	apiAddr := "127.0.0.1:" + freePort(t)
	api := startProcess(t, env, map[string]string{"LEADERBOARD_ROLES": "api", "LEADERBOARD_KAFKA_BROKERS": brokerAddr,
		"LEADERBOARD_HTTP_ADDR": apiAddr}, "http://"+apiAddr, "serve")
	late := mintToken(t, "late-api-user")
	if r := (&service{base: api.base}).submit(t, late, `{"score": 4242, "event_id": "late-1"}`); r.status != 202 {
		t.Fatalf("a write to the API started during the outage: %d %s", r.status, r.raw)
	}
	metricsShow(t, &service{base: api.base}, "leaderboard_realtime_notifier_up 0")
	startProcess(t, env, nil, "", brokerArgs...)
	waitTCP(t, brokerAddr)
	time.Sleep(2 * time.Second)
	n := w.finish()
	w.checkExactlyOnce(t, env, base, 90*time.Second)
	t.Logf("%d acknowledged writes, across a 30 s broker outage", n)
	metricsShow(t, &service{base: api.base}, "leaderboard_realtime_notifier_up 1")
	eventually(t, 30*time.Second, func() string {
		if r := (&service{base: api.base}).do(t, http.MethodGet, "/v1/leaderboard/users/late-api-user", late, ""); r.status != 200 || num(r.body["score"]) != 4242 {
			return fmt.Sprintf("the late API's write: %d %s", r.status, r.raw)
		}
		return ""
	})
}

// TestProjectorReplicaKilled: two projector processes share the score partitions; once
// both apply, one is killed under load with batches in flight (PostgreSQL holds them for
// a few of the consumer's auto-commit intervals), and the other takes its partitions:
// nothing acknowledged is lost, nothing applied twice (the writer's increments would
// show either). It killed an idle replica before: a projector that acked before applying
// passed it (found by a review of the scale-out tests).
func TestProjectorReplicaKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs several processes")
	}
	t.Parallel()
	env := newTestEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	api := startProcess(t, env, map[string]string{"LEADERBOARD_ROLES": "api,relay", "LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker},
		"http://"+env.vars["LEADERBOARD_HTTP_ADDR"], "serve")
	projector := func() *process {
		addr := "127.0.0.1:" + freePort(t)
		return startProcess(t, env, map[string]string{"LEADERBOARD_ROLES": "projector", "LEADERBOARD_KAFKA_BROKERS": broker,
			"LEADERBOARD_HTTP_ADDR": addr}, "http://"+addr, "serve")
	}
	victim, survivor := projector(), projector()
	base := func() string { return api.base }
	w := startWriter(t, base, 4)
	applied := func(p *process) float64 {
		var sum float64
		for series, v := range scrape(t, &service{base: p.base}) {
			if strings.HasPrefix(series, "leaderboard_projector_events_total{") && strings.Contains(series, `result="applied"`) {
				sum += v
			}
		}
		return sum
	}
	eventually(t, 60*time.Second, func() string {
		if v, s := applied(victim), applied(survivor); v == 0 || s == 0 {
			return fmt.Sprintf("applied: victim %v, survivor %v (both must hold partitions)", v, s)
		}
		return ""
	})
	ctx := context.Background()
	tx, err := env.db().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE score_history IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() string { // the projectors' batches wait on the lock, their messages unacked
		if n := env.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`); n < 2 {
			return fmt.Sprintf("%d batches wait on the lock", n)
		}
		return ""
	})
	time.Sleep(time.Second) // more gathered behind them, past the consumer's auto-commit interval
	victim.kill(syscall.SIGKILL)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	n := w.finish()
	w.checkExactlyOnce(t, env, base, 90*time.Second)
	if survivor.cmd.ProcessState != nil {
		t.Fatal("the surviving projector exited")
	}
	t.Logf("%d acknowledged writes, one of two projectors killed with batches in flight", n)
}

// waitTCP waits until something listens on addr.
func waitTCP(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := (&net.Dialer{Timeout: time.Second}).Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s", addr)
}

// TestRetryOfAnAcceptedWriteIsAnsweredWhileTheBacklogIsFull: a write accepted
// (202) whose answer the client lost is retried with the same event id while the backlog
// is full. The retry adds nothing to the outbox; as for the rate limit (a retry is
// answered as the first time, README "Protecting your board"), it should be answered as
// the first time (202 accepted), not 503 backlog_full: a client whose 202 was lost keeps
// being told its accepted write was refused ("retry") for as long as the pipeline is
// behind, and may give up on a write the service will apply (it was 503; found by a
// review of the write path).
func TestRetryOfAnAcceptedWriteIsAnsweredWhileTheBacklogIsFull(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	// An API without relay and projector: nothing leaves the outbox.
	svc := env.start(map[string]string{"LEADERBOARD_ROLES": "api", "LEADERBOARD_MAX_BACKLOG": "3"})
	srv := mintToken(t, "gs37", "server")
	for i := range 5 {
		r := svc.submit(t, srv, fmt.Sprintf(`{"score": %d, "user_id": "bf-%d", "event_id": "bf-%d"}`, i+1, i, i))
		if r.status != http.StatusAccepted {
			t.Fatalf("write %d: %d %s", i, r.status, r.raw)
		}
	}
	// Wait for the backlog count to see them (new writes, each its own event id).
	n := 0
	eventually(t, 10*time.Second, func() string {
		n++
		r := svc.submit(t, srv, fmt.Sprintf(`{"score": 1, "user_id": "bf-new", "event_id": "bf-new-%d"}`, n))
		if r.status == 503 && r.body["error_code"] == "backlog_full" {
			return ""
		}
		return fmt.Sprintf("%d %s", r.status, r.raw)
	})
	r := svc.submit(t, srv, `{"score": 1, "user_id": "bf-0", "event_id": "bf-0"}`)
	if r.status != http.StatusAccepted {
		t.Errorf("retry of an accepted write while the backlog is full: %d %s, want 202 as the first time", r.status, r.raw)
	}
	if r := svc.submit(t, srv, `{"score": 2, "user_id": "bf-0", "event_id": "bf-0"}`); r.status != http.StatusConflict {
		t.Errorf("another body under an accepted event id while the backlog is full: %d %s, want 409", r.status, r.raw)
	}
	if r := svc.submit(t, srv, `{"score": 1, "user_id": "bf-9", "event_id": "bf-9"}`); r.status != 503 || r.body["error_code"] != "backlog_full" {
		t.Errorf("a new write while the backlog is full: %d %s, want 503 backlog_full", r.status, r.raw)
	}
}
