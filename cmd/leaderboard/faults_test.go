package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/router"
)

// proxy is a TCP proxy a test can cut, to take PostgreSQL or Redis away from the
// service without stopping the shared server.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.setDown(true) })
	go p.serve()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close(); c.Close() }()
		go func() { _, _ = io.Copy(c, up); up.Close(); c.Close() }()
	}
}

// setDown refuses new connections and cuts the open ones (down), or lets them through.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]bool{}
	}
}

func produceRaw(t *testing.T, broker, topic string, msgs ...*sarama.ProducerMessage) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = router.KafkaVersion
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer([]string{broker}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, m := range msgs {
		m.Topic = topic
		if _, _, err := p.SendMessage(m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPoisonMessagesGoToDeadLetters: malformed messages on the score topic land in the
// dead letters with their reason, and the pipeline keeps flowing.
func TestPoisonMessagesGoToDeadLetters(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	svc := env.start(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker})
	unknownBoard, _ := json.Marshal(messages.ScoreSubmitted{EventID: "e-unknown", Board: "nope", Period: "all_time", UserID: "u1", Value: 1, OccurredAt: time.Now()})
	produceRaw(t, broker, "leaderboard.score-events",
		&sarama.ProducerMessage{Key: sarama.StringEncoder("u1"), Value: sarama.StringEncoder(`{"event_id": "e-broken", "value": `)},
		&sarama.ProducerMessage{Key: sarama.StringEncoder("u1"), Value: sarama.ByteEncoder([]byte{0xff, 0xfe, 0x00, 0x01})},
		&sarama.ProducerMessage{Key: sarama.StringEncoder("u1"), Value: sarama.ByteEncoder(unknownBoard),
			Headers: []sarama.RecordHeader{{Key: []byte("event_id"), Value: []byte("e-unknown")}}},
	)
	// u1's score shares the poison's partition (same key): it applies only if the
	// poison is moved out of the way rather than retried forever.
	tok := mintToken(t, "u1")
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", tok, `{"score": 5}`); r.status != 200 && r.status != 202 {
		t.Fatalf("submit behind poison: %d %s", r.status, r.raw)
	}
	eventually(t, 20*time.Second, func() string {
		if r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/u1", tok, ""); r.status != 200 || num(r.body["score"]) != 5 {
			return "pipeline stalled behind poison: " + r.raw
		}
		return ""
	})
	eventually(t, 20*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM dead_letters`); n != 3 {
			return fmt.Sprintf("%d dead letters", n)
		}
		return ""
	})
	rows, err := env.db().Query(context.Background(), `SELECT reason, topic, handler, payload, coalesce(event_id, '') FROM dead_letters ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var reasons []string
	for rows.Next() {
		var reason, topic, handler, eventID string
		var payload []byte
		if err := rows.Scan(&reason, &topic, &handler, &payload, &eventID); err != nil {
			t.Fatal(err)
		}
		if topic != "leaderboard.score-events" || handler != router.ProjectorHandlerName || len(payload) == 0 {
			t.Errorf("dead letter metadata: topic %q handler %q payload %q", topic, handler, payload)
		}
		reasons = append(reasons, reason)
	}
	all := strings.Join(reasons, " | ")
	for _, want := range []string{"decode ScoreSubmitted", "unknown board"} {
		if !strings.Contains(all, want) {
			t.Errorf("reasons %q lack %q", all, want)
		}
	}
}

// TestRedeliveryAppliesOnce: a Kafka message delivered again, and the whole outbox
// replayed, change nothing; a redelivery still repairs a Redis entry that was lost.
func TestRedeliveryAppliesOnce(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	// No pruning during the test: an outbox row goes only with its command's application
	// (the projector deletes it); every row that goes is kept, to be replayed.
	svc := env.start(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker, "LEADERBOARD_OUTBOX_PRUNE_INTERVAL": "1h"})
	env.keepOutboxRows()
	for i, u := range []string{"r1", "r2", "r3"} {
		body := fmt.Sprintf(`{"score": %d, "event_id": "ev-%s"}`, 100*(i+1), u)
		if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", mintToken(t, u), body); r.status != 200 {
			t.Fatalf("submit: %d %s", r.status, r.raw)
		}
	}
	state := func() string {
		var s string
		if err := env.db().QueryRow(context.Background(),
			`SELECT string_agg(user_id || ':' || score || ':' || version, ',' ORDER BY user_id) FROM board_entries WHERE user_id <> 'marker'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := state()

	// Lose r1 from Redis, then redeliver its event with a different value: the event id
	// is applied already, so PostgreSQL keeps 100 and Redis is repaired to it.
	k := env.prefix + ":{global}:all_time:"
	// A board this small keeps its entries in one hash, u; a member is the record's 8-byte
	// time prefix and the user (storage/record.go).
	member := env.rdb.HGet(context.Background(), k+"u", "r1").Val()[:8] + "r1"
	env.rdb.HDel(context.Background(), k+"u", "r1")
	env.rdb.ZRem(context.Background(), k+"z", member)
	dup, _ := json.Marshal(messages.ScoreSubmitted{EventID: "ev-r1", Board: "global", Period: "all_time", UserID: "r1", Value: 999999, OccurredAt: time.Now()})
	produceRaw(t, broker, "leaderboard.score-events", &sarama.ProducerMessage{Key: sarama.StringEncoder("r1"), Value: sarama.ByteEncoder(dup)})
	tok := mintToken(t, "reader")
	eventually(t, 20*time.Second, func() string {
		r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/r1", tok, "")
		if r.status != 200 || num(r.body["score"]) != 100 {
			return r.raw
		}
		return ""
	})

	// Replay the whole outbox. The projector deleted each row as it applied it (with no
	// prune running): each of the three must come back to the projector as a redelivery.
	const redelivered = `leaderboard_projector_events_total{board="global",result="redelivered"}`
	redeliveredBefore := scrape(t, svc)[redelivered]
	for shard := range 2 {
		if n := env.count(fmt.Sprintf(`SELECT count(*) FROM "watermill_score_commands_%d"`, shard)); n != 0 {
			t.Fatalf("%d rows left in outbox shard %d after their commands were applied", n, shard)
		}
	}
	replayed := env.replayOutbox()
	if replayed != 3 {
		t.Fatalf("%d outbox rows to replay, want the 3 commands", replayed)
	}
	// A marker submitted after the replay goes through the pipeline too.
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", mintToken(t, "marker"), `{"score": 1}`); r.status != 200 {
		t.Fatalf("marker: %d %s", r.status, r.raw)
	}
	eventually(t, 20*time.Second, func() string {
		if got := scrape(t, svc)[redelivered] - redeliveredBefore; got < float64(replayed) {
			return fmt.Sprintf("%v of %d replayed rows redelivered to the projector", got, replayed)
		}
		return ""
	})
	t.Logf("%d outbox rows replayed", replayed)
	if after := state(); after != before {
		t.Fatalf("replay changed entries:\nbefore %s\nafter  %s", before, after)
	}
	if n := env.count(`SELECT count(*) FROM score_history`); n != 4 {
		t.Fatalf("history rows %d, want 4", n)
	}
	if n := env.count(`SELECT count(*) FROM dead_letters`); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// TestRedisOutage: with Redis gone, writes are still accepted and nothing is
// dead-lettered; when Redis returns, everything is applied.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newProxy(t, testRedis)
	svc := env.start(map[string]string{"LEADERBOARD_REDIS_URL": "redis://" + px.addr() + "/0"})
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", mintToken(t, "before"), `{"score": 1}`); r.status != 200 {
		t.Fatalf("submit: %d %s", r.status, r.raw)
	}
	px.setDown(true)
	for i := range 20 {
		u := fmt.Sprintf("during-%02d", i)
		if r := svc.submit(t, mintToken(t, u), fmt.Sprintf(`{"score": %d}`, 10+i)); r.status != http.StatusAccepted {
			t.Fatalf("write during Redis outage: %d %s", r.status, r.raw)
		}
	}
	// The projector applies to PostgreSQL and keeps retrying Redis (each failing message
	// holds its user's later ones, and its partition once a window's worth is read past
	// it): nothing is poisoned.
	eventually(t, 20*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM score_history`); n < 2 {
			return fmt.Sprintf("history %d", n)
		}
		return ""
	})
	time.Sleep(4 * time.Second) // longer than one retry cycle of the projector
	if n := env.count(`SELECT count(*) FROM dead_letters`); n != 0 {
		t.Fatalf("Redis outage dead-lettered %d messages", n)
	}
	px.setDown(false)
	tok := mintToken(t, "reader")
	eventually(t, 20*time.Second, func() string {
		for i := range 20 {
			u := fmt.Sprintf("during-%02d", i)
			r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/"+u, tok, "")
			if r.status != 200 || num(r.body["score"]) != int64(10+i) {
				return u + ": " + r.raw
			}
		}
		return ""
	})
	r := svc.do(t, http.MethodGet, "/v1/leaderboard/top?limit=100", tok, "")
	if n := len(r.body["entries"].([]any)); n != 21 {
		t.Fatalf("top has %d entries after recovery, want 21", n)
	}
}

// TestPostgresOutage: with PostgreSQL gone, writes get 503 and nothing is acknowledged;
// when it returns, writes are accepted again.
func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newProxy(t, testPostgresHost(t))
	pgURL, _ := url.Parse(env.vars["LEADERBOARD_POSTGRES_URL"])
	pgURL.Host = px.addr()
	svc := env.start(map[string]string{"LEADERBOARD_POSTGRES_URL": pgURL.String()})
	tok := mintToken(t, "pg")
	px.setDown(true)
	r := svc.submit(t, tok, `{"score": 5, "event_id": "pg-1"}`)
	if r.status != http.StatusServiceUnavailable || r.body["error_code"] != "dependency_unavailable" || r.body["event_id"] != "pg-1" {
		t.Fatalf("write with PostgreSQL down: %d %s", r.status, r.raw)
	}
	if rr := svc.do(t, http.MethodGet, "/readyz", "", ""); rr.status != 503 || !strings.Contains(rr.raw, "postgres") {
		t.Fatalf("readyz with PostgreSQL down: %d %s", rr.status, rr.raw)
	}
	px.setDown(false)
	// The client retries with the same event id until PostgreSQL takes it; then it applies.
	eventually(t, 20*time.Second, func() string {
		r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", tok, `{"score": 5, "event_id": "pg-1"}`)
		switch r.status {
		case http.StatusServiceUnavailable:
			return r.raw
		case http.StatusOK, http.StatusAccepted:
			return ""
		}
		t.Fatalf("write after PostgreSQL returned: %d %s", r.status, r.raw)
		return ""
	})
	eventually(t, 20*time.Second, func() string {
		if r := svc.do(t, http.MethodGet, "/v1/leaderboard/me", tok, ""); r.status != 200 || num(r.body["score"]) != 5 {
			return r.raw
		}
		return ""
	})
}

// TestDegradedReadsMatchRedis: with Redis unreachable, top-N and per-user reads come from
// PostgreSQL within a few seconds (a failed call and its retry of 300 ms each at most, and a
// stall of a loaded machine: not a hang), marked degraded, in the same order (ties included); when
// Redis is back, reads come from it again.
func TestDegradedReadsMatchRedis(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newProxy(t, testRedis)
	svc := env.start(map[string]string{"LEADERBOARD_REDIS_URL": "redis://" + px.addr() + "/0"})
	scores := map[string]int{"d-zed": 500, "d-amy": 500, "d-bob": 700, "d-cat": 100, "d-dan": 500, "d-eve": 900}
	for _, u := range []string{"d-zed", "d-amy", "d-bob", "d-cat", "d-dan", "d-eve"} {
		if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", mintToken(t, u), fmt.Sprintf(`{"score": %d}`, scores[u])); r.status != 200 {
			t.Fatalf("submit %s: %d %s", u, r.status, r.raw)
		}
	}
	tok := mintToken(t, "reader")
	read := func() (string, map[string]int64, []string) {
		r := svc.do(t, http.MethodGet, "/v1/leaderboard/top?limit=10", tok, "")
		var order []string
		for _, e := range r.body["entries"].([]any) {
			m := e.(map[string]any)
			order = append(order, fmt.Sprintf("%d:%s:%d:%s", num(m["rank"]), m["user_id"], num(m["score"]), m["nick_name"]))
		}
		ranks := map[string]int64{}
		headers := []string{r.header.Get("X-Leaderboard-Degraded")}
		for u := range scores {
			ru := svc.do(t, http.MethodGet, "/v1/leaderboard/users/"+u, tok, "")
			ranks[u] = num(ru.body["rank"])
			headers = append(headers, ru.header.Get("X-Leaderboard-Degraded"))
		}
		return strings.Join(order, " "), ranks, headers
	}
	fromRedis, redisRanks, headers := read()
	for _, h := range headers {
		if h != "" {
			t.Fatalf("degraded header with Redis up: %q", h)
		}
	}
	px.setDown(true)
	start := time.Now()
	r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/d-amy", tok, "")
	if took := time.Since(start); r.status != 200 || took > 3*time.Second || r.header.Get("X-Leaderboard-Degraded") != "redis-unavailable" {
		t.Fatalf("read with Redis down: %d in %v, header %q: %s", r.status, took, r.header.Get("X-Leaderboard-Degraded"), r.raw)
	}
	fromPG, pgRanks, headers := read()
	if fromPG != fromRedis {
		t.Fatalf("top from PostgreSQL differs:\n redis    %s\n postgres %s", fromRedis, fromPG)
	}
	if fmt.Sprint(pgRanks) != fmt.Sprint(redisRanks) {
		t.Fatalf("ranks from PostgreSQL %v, from Redis %v", pgRanks, redisRanks)
	}
	for _, h := range headers {
		if h != "redis-unavailable" {
			t.Fatalf("degraded read not marked: %q", h)
		}
	}
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/nobody", tok, ""); r.status != 404 {
		t.Fatalf("unknown user while degraded: %d", r.status)
	}
	px.setDown(false)
	eventually(t, 20*time.Second, func() string {
		if _, _, headers := read(); headers[0] != "" {
			return "still degraded after Redis returned"
		}
		return ""
	})
}

// TestPoisonRejectedByPostgres: a valid-JSON event that PostgreSQL would refuse (a NUL in
// its period) lands in the dead letters with its reason within seconds, instead of being
// retried forever, and a score accepted afterwards for a user of the same partition is
// applied.
func TestPoisonRejectedByPostgres(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	svc := env.start(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker})
	start := time.Now()
	produceRaw(t, broker, "leaderboard.score-events", &sarama.ProducerMessage{
		Key:     sarama.StringEncoder("nul-user"),
		Value:   sarama.StringEncoder(`{"event_id":"e-nul","board":"global","period":"all\u0000time","user_id":"nul-user","value":5,"occurred_at":"2026-01-01T00:00:00Z"}`),
		Headers: []sarama.RecordHeader{{Key: []byte("event_id"), Value: []byte("e-nul")}, {Key: []byte("partition_key"), Value: []byte("nul-user")}},
	})
	eventually(t, 10*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM dead_letters WHERE event_id = 'e-nul' AND reason LIKE '%period%'`); n != 1 {
			return fmt.Sprintf("%d dead letters for e-nul naming the period", n)
		}
		return ""
	})
	t.Logf("dead-lettered %v after it was produced", time.Since(start))
	tok := mintToken(t, "nul-user")
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", tok, `{"score": 7}`); r.status != 200 {
		t.Fatalf("score behind the poison: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodGet, "/readyz", "", ""); r.status != 200 {
		t.Fatalf("readyz after the poison: %d %s", r.status, r.raw)
	}
}

// TestStuckPartitionIsVisible: a message that keeps failing with a transient error shows
// its age in /metrics, and past LEADERBOARD_PROJECTOR_STUCK_AFTER /readyz names the
// projector; both clear once it applies.
func TestStuckPartitionIsVisible(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newProxy(t, testRedis)
	svc := env.start(map[string]string{"LEADERBOARD_REDIS_URL": "redis://" + px.addr() + "/0", "LEADERBOARD_PROJECTOR_STUCK_AFTER": "2s"})
	px.setDown(true)
	if r := svc.submit(t, mintToken(t, "stuck"), `{"score": 3}`); r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.raw)
	}
	eventually(t, 30*time.Second, func() string {
		r := svc.do(t, http.MethodGet, "/readyz", "", "")
		if r.status != 503 || !strings.Contains(r.raw, "projector") {
			return "readyz: " + r.raw
		}
		for series, v := range scrape(t, svc) {
			if strings.HasPrefix(series, "leaderboard_projector_stuck_seconds{") && v >= 2 {
				return ""
			}
		}
		return "no partition stuck for 2 s in /metrics"
	})
	px.setDown(false)
	eventually(t, 30*time.Second, func() string {
		if r := svc.do(t, http.MethodGet, "/readyz", "", ""); r.status != 200 {
			return "readyz: " + r.raw
		}
		for series, v := range scrape(t, svc) {
			if strings.HasPrefix(series, "leaderboard_projector_stuck_seconds{") && v != 0 {
				return fmt.Sprintf("%s = %v after recovery", series, v)
			}
		}
		return ""
	})
}

// TestWarnsWhenRedisMayEvict: the mirror needs maxmemory-policy noeviction (a board
// period that loses some of its keys reads wrong ranks until a rebuild); a service whose
// Redis may evict keys says so at start, and one whose Redis does not, does not.
func TestWarnsWhenRedisMayEvict(t *testing.T) {
	t.Parallel()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not installed (make test installs it)")
	}
	port := freePort(t)
	cmd := exec.Command(server, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitTCP(t, "127.0.0.1:"+port)
	evicting := newTestEnv(t).start(map[string]string{"LEADERBOARD_REDIS_URL": "redis://127.0.0.1:" + port + "/0"})
	if logs := evicting.logs.String(); !strings.Contains(logs, "maxmemory-policy allkeys-lru") {
		t.Errorf("no warning at start against a Redis that evicts keys (allkeys-lru):\n%s", tail(logs, 2000))
	}
	if logs := newTestEnv(t).start(nil).logs.String(); strings.Contains(logs, "maxmemory-policy") {
		t.Errorf("a warning at start against the machine's Redis (noeviction):\n%s", tail(logs, 2000))
	}
}

// TestUnchangedRetryWhileRedisIsDownIsNotAccepted: a best score answered
// "unchanged" (its client's event id recorded so) and retried while Redis is down must
// not be answered 202 "accepted": nothing was put in the outbox and nothing will ever be
// applied, yet the client is told its write is on its way. The first answer was
// "unchanged"; the retry is answered so again, from PostgreSQL (it was 202; found by a
// review of the write path).
func TestUnchangedRetryWhileRedisIsDownIsNotAccepted(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newProxy(t, testRedis)
	svc := env.start(map[string]string{"LEADERBOARD_REDIS_URL": "redis://" + px.addr() + "/0"})
	tok := mintToken(t, "r37-unchanged")
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", tok, `{"score": 100, "event_id": "r37-high"}`); r.status != 200 {
		t.Fatalf("first write: %d %s", r.status, r.raw)
	}
	r := svc.submit(t, tok, `{"score": 50, "event_id": "r37-low"}`)
	if r.status != 200 || r.body["status"] != "unchanged" {
		t.Fatalf("lower score: %d %s, want 200 unchanged", r.status, r.raw)
	}
	px.setDown(true)
	r = svc.submit(t, tok, `{"score": 50, "event_id": "r37-low"}`)
	if r.status != 200 || r.body["status"] != "unchanged" || num(r.body["score"]) != 100 {
		t.Errorf("retry of a write answered unchanged, Redis down: %d %s, want 200 unchanged with the entry's 100 (202 accepted: it is in no outbox and never applied)", r.status, r.raw)
	}
	if n := env.count(`SELECT count(*) FROM score_history WHERE event_id = 'r37-low'`); n != 0 {
		t.Errorf("the unchanged write was applied %d times", n)
	}
}
