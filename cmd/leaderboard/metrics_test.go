package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// scrape returns every series of /metrics by its name and labels, as printed.
func scrape(t *testing.T, s *service) map[string]float64 {
	t.Helper()
	r := s.do(t, http.MethodGet, "/metrics", "", "")
	if r.status != 200 {
		t.Fatalf("/metrics: %d %s", r.status, r.raw)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(r.raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// TestMetricsMove scrapes /metrics before and after scores and a poison message flow
// through, and finds the HTTP, outbox, relay, Kafka, projector, dead-letter, pool and
// realtime series present and moving.
func TestMetricsMove(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	svc := env.start(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker})
	before := scrape(t, svc)
	for i := range 5 {
		if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", mintToken(t, fmt.Sprintf("m-%d", i)), `{"score": 10}`); r.status != 200 {
			t.Fatalf("submit: %d %s", r.status, r.raw)
		}
	}
	produceRaw(t, broker, "leaderboard.score-events", &sarama.ProducerMessage{Value: sarama.StringEncoder("not json")})
	// Every series must move; scrape until they all have. A scrape gathers its collectors
	// concurrently, and the projector counts an event just after Redis shows it, so one
	// scrape can see the effect of a message before the series that count it.
	moves := []struct {
		series  string
		atLeast float64
	}{
		{`leaderboard_http_requests_total{method="POST",route="/v1/scores",status="200"}`, 5},
		{`leaderboard_score_submissions_total{board="global",outcome="accepted"}`, 5},
		{`leaderboard_outbox_batch_size_count`, 1},
		{`leaderboard_projector_events_total{board="global",result="applied"}`, 5},
		{`leaderboard_projection_lag_seconds_count`, 5},
		{`leaderboard_projector_step_seconds_count{step="postgres"}`, 1},
		{`leaderboard_watermill_handler_execution_time_seconds_count{handler_name="apply-score",success="true"}`, 5},
		{`leaderboard_watermill_handler_execution_time_seconds_count{handler_name="apply-score",success="false"}`, 1}, // the poison message, tried once
		{`leaderboard_relay_messages_total`, 5},
		{`leaderboard_watermill_handler_execution_time_seconds_count{handler_name="notify-top-changed",success="true"}`, 1},
	}
	var after map[string]float64
	eventually(t, 20*time.Second, func() string {
		after = scrape(t, svc)
		var lagging []string
		if n := after["leaderboard_dead_letters"]; n != 1 { // counted off the scrape, at most every 2 s
			lagging = append(lagging, fmt.Sprintf("leaderboard_dead_letters is %v, want 1", n))
		}
		for _, m := range moves {
			if d := after[m.series] - before[m.series]; d < m.atLeast {
				lagging = append(lagging, fmt.Sprintf("%s moved by %v, want at least %v", m.series, d, m.atLeast))
			}
		}
		return strings.Join(lagging, "; ")
	})
	if after["leaderboard_dead_letters"] != 1 {
		t.Errorf("leaderboard_dead_letters = %v, want 1", after["leaderboard_dead_letters"])
	}
	for _, series := range []string{
		`leaderboard_outbox_backlog{shard="0"}`,
		`leaderboard_kafka_consumer_lag{group="leaderboard-projector",partition="0",topic="leaderboard.score-events"}`,
		`leaderboard_postgres_pool_connections`,
		`leaderboard_redis_pool_connections`,
		`leaderboard_sse_clients`,
		`leaderboard_degraded_reads_total`,
		`process_resident_memory_bytes`,
	} {
		if _, ok := after[series]; !ok {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

// TestCorrelationIDFollowsTheScore: the request id of the HTTP request is the
// correlation id the projector logs when it applies the score.
func TestCorrelationIDFollowsTheScore(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(map[string]string{"LEADERBOARD_LOG_LEVEL": "debug"})
	req, _ := http.NewRequest(http.MethodPost, svc.base+"/v1/scores?wait=true", strings.NewReader(`{"score": 3, "event_id": "corr-ev"}`))
	req.Header.Set("Authorization", "Bearer "+mintToken(t, "corr"))
	req.Header.Set("X-Request-ID", "trace-me-123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Request-ID") != "trace-me-123" {
		t.Fatalf("submit: %d, X-Request-ID %q", resp.StatusCode, resp.Header.Get("X-Request-ID"))
	}
	eventually(t, 20*time.Second, func() string {
		for _, line := range strings.Split(svc.logs.String(), "\n") {
			if strings.Contains(line, `"msg":"message handled"`) && strings.Contains(line, `"correlation_id":"trace-me-123"`) && strings.Contains(line, `"event_id":"corr-ev"`) {
				return ""
			}
		}
		return "no projector log line with the request's correlation id"
	})
	if !strings.Contains(svc.logs.String(), `"request_id":"trace-me-123"`) {
		t.Fatal("the API did not log the request id")
	}
}

// TestMetricsScrapeDoesNotHoldPostgres: every GET /metrics (unauthenticated, on
// the public API address) once ran SELECT count(*) FROM dead_letters on the request path
// (leaderboard_dead_letters), holding a pool connection for up to a second, with no bound
// on concurrent scrapes. When that count is slow (a big dead
// letter table after an incident; here: the table locked, as a VACUUM FULL or a bulk
// requeue would), anyone can fill the API's PostgreSQL pool with scrapes and the
// players' writes wait behind them. The count is taken off the scrape's path, one at a
// time (found by a review of deployment defaults). The relay's count of each outbox
// shard's backlog (leaderboard_outbox_backlog, on every process running the relay, the
// default `all` among them) did the same per scrape, each over the whole backlog (found by
// a later review); it is counted the same way now.
func TestMetricsScrapeDoesNotHoldPostgres(t *testing.T) {
	t.Parallel()
	t.Run("dead letters", func(t *testing.T) {
		t.Parallel()
		// The API alone: nothing else of it reads dead_letters.
		scrapesHoldNoPostgres(t, "api", "dead_letters", 1, true)
	})
	t.Run("outbox backlog", func(t *testing.T) {
		t.Parallel()
		// The relay alone: nothing else of it counts the outbox.
		scrapesHoldNoPostgres(t, "relay", "watermill_score_commands_0", 1, false)
	})
}

// scrapesHoldNoPostgres locks table, runs anonymous scrapers against a process of roles,
// and checks that at most allowed backends wait on the table (and with writes, that the
// players' writes go through meanwhile).
func scrapesHoldNoPostgres(t *testing.T, roles, table string, allowed int, writes bool) {
	env := newTestEnv(t)
	svc := env.start(map[string]string{"LEADERBOARD_POSTGRES_MAX_CONNS": "4", "LEADERBOARD_RATE_LIMIT": "off",
		"LEADERBOARD_ROLES": roles})
	player := mintToken(t, "victim")
	if writes {
		if r := svc.submit(t, player, `{"score": 1}`); r.status != http.StatusAccepted {
			t.Fatalf("warm-up write: %d %s", r.status, r.raw)
		}
	}

	// Hold the table the way a long maintenance statement would.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tx, err := env.db().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	// Anonymous scrapers, as many as the pool has connections and more.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get(svc.base + "/metrics")
				if err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)

	// No scrape waits on PostgreSQL: at most the one count off the scrape's path waits
	// for the table, where a count per scrape had the pool's every connection (4) waiting
	// behind the lock. (Backends, not latencies: the machine's speed does not move them.)
	waiting := 0
	for range 5 {
		var n int
		// Counts only (the relay's own reads and prunes of the shard wait too).
		if err := env.db().QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE c.relname = $1 AND NOT l.granted AND a.query LIKE '%count(*)%'
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		waiting = max(waiting, n)
		time.Sleep(100 * time.Millisecond)
	}
	if r := svc.do(t, http.MethodGet, "/metrics", "", ""); r.status != 200 {
		t.Errorf("/metrics: %d", r.status)
	}

	// The players' writes go through meanwhile.
	failed := 0
	for i := range 5 {
		if !writes {
			break
		}
		r := svc.submit(t, player, `{"score": `+string(rune('2'+i))+`}`)
		if r.status != http.StatusAccepted && r.status != http.StatusOK {
			failed++
		}
	}
	close(stop)
	wg.Wait()

	if waiting > allowed || failed > 0 {
		t.Errorf("with anonymous scrapers running and %s locked, %d backends waited on the table (want at most %d: the count off the scrape's path) and %d of 5 writes failed: /metrics holds the process's PostgreSQL pool", table, waiting, allowed, failed)
	}
}
