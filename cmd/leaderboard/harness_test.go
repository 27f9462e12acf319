package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/openleaderboard/leaderboard/storage"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/openleaderboard/leaderboard/configs"
	lbhttp "github.com/openleaderboard/leaderboard/http"
	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

const testSecret = "component-test-secret-0123456789"

// servers are the PostgreSQL and Redis the tests run against (LEADERBOARD_TEST_POSTGRES_URL,
// LEADERBOARD_TEST_REDIS_ADDR; the local ones by default), shared with the storage tests.
var servers = storagetest.FromEnv(os.Getenv)

// testRedis is host:port of the test Redis, for proxies that stand in front of it.
var testRedis = servers.RedisAddr

// testPostgresHost is host:port of the test PostgreSQL.
func testPostgresHost(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(servers.PostgresAdminURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// testEnv is one isolated deployment: its own database, Redis prefix, broker data dir
// and topic prefix. Services started from it share them, like replicas would.
type testEnv struct {
	t        *testing.T
	dbName   string
	prefix   string
	kafkaDir string
	vars     map[string]string
	pool     *pgxpool.Pool
	rdb      *redis.Client
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	e := &testEnv{t: t, kafkaDir: t.TempDir()}
	var dbURL string
	e.dbName, dbURL = servers.DatabaseURL(t)
	e.rdb, e.prefix = servers.NewRedis(t)
	e.vars = map[string]string{
		"LEADERBOARD_HTTP_ADDR":           "127.0.0.1:" + freePort(t),
		"LEADERBOARD_POSTGRES_URL":        dbURL,
		"LEADERBOARD_REDIS_URL":           "redis://" + testRedis + "/0",
		"LEADERBOARD_REDIS_PREFIX":        e.prefix,
		"LEADERBOARD_KAFKA_BROKERS":       "embedded",
		"LEADERBOARD_KAFKA_DATA_DIR":      e.kafkaDir,
		"LEADERBOARD_KAFKA_EMBEDDED_ADDR": "127.0.0.1:0",
		"LEADERBOARD_JWT_SECRET":          testSecret,
		"LEADERBOARD_LOG_LEVEL":           "warn",
		"LEADERBOARD_SCORE_PARTITIONS":    "6",
		"LEADERBOARD_OUTBOX_SHARDS":       "2",
		// ?wait=true answers 200 "applied" once the score is applied: give a pipeline
		// slowed by a loaded CI machine far longer than the 5 s default to get there.
		"LEADERBOARD_WAIT_TIMEOUT": "30s",
		// Tests of other parts write faster than a player may; the trust tests turn it on.
		"LEADERBOARD_RATE_LIMIT": "off",
	}
	t.Cleanup(func() { // runs before the database is dropped
		if e.pool != nil {
			e.pool.Close()
		}
	})
	return e
}

func (e *testEnv) getenv(overrides map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := overrides[k]; ok {
			return v
		}
		return e.vars[k]
	}
}

// db connects to the env's database (after a service has created it).
func (e *testEnv) db() *pgxpool.Pool {
	e.t.Helper()
	if e.pool == nil {
		p, err := pgxpool.New(context.Background(), e.vars["LEADERBOARD_POSTGRES_URL"])
		if err != nil {
			e.t.Fatal(err)
		}
		e.pool = p
	}
	return e.pool
}

func (e *testEnv) count(query string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db().QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// keepOutboxRows copies every outbox row deleted from now on (by the projector as it
// applies the row's command, or by the prune) into outbox_kept, so that replayOutbox can
// put them back. Call it once a service has created the tables (the env's 2 shards).
func (e *testEnv) keepOutboxRows() {
	e.t.Helper()
	qs := []string{
		`CREATE TABLE outbox_kept (kept bigserial PRIMARY KEY, shard int NOT NULL, uuid text NOT NULL, payload json, metadata json)`,
		`CREATE FUNCTION keep_outbox_row() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO outbox_kept (shard, uuid, payload, metadata) VALUES (TG_ARGV[0]::int, OLD.uuid, OLD.payload, OLD.metadata);
			RETURN OLD;
		END $$`,
	}
	for shard := range 2 {
		qs = append(qs, fmt.Sprintf(`CREATE TRIGGER keep BEFORE DELETE ON "watermill_score_commands_%d" FOR EACH ROW EXECUTE FUNCTION keep_outbox_row('%d')`, shard, shard))
	}
	for _, q := range qs {
		if _, err := e.db().Exec(context.Background(), q); err != nil {
			e.t.Fatalf("%s: %v", q, err)
		}
	}
}

// replayOutbox puts every outbox row kept since keepOutboxRows back into its shard, as a
// new row with the same message, in the order they went, and wakes the relays; it returns
// how many. The relay forwards them again: the outbox replayed from the start, as a relay
// that lost its position would (applied rows are deleted as they are applied, so a replay
// of them needs them back).
func (e *testEnv) replayOutbox() int {
	e.t.Helper()
	var n int
	err := e.db().QueryRow(context.Background(), `
		WITH kept AS (DELETE FROM outbox_kept RETURNING *),
		back AS (
			INSERT INTO "watermill_score_commands_0" (uuid, payload, metadata, transaction_id)
			SELECT uuid, payload, metadata, pg_current_xact_id() FROM kept WHERE shard = 0 ORDER BY kept
			RETURNING 1
		), back1 AS (
			INSERT INTO "watermill_score_commands_1" (uuid, payload, metadata, transaction_id)
			SELECT uuid, payload, metadata, pg_current_xact_id() FROM kept WHERE shard = 1 ORDER BY kept
			RETURNING 1
		)
		SELECT (SELECT count(*) FROM back) + (SELECT count(*) FROM back1)`).Scan(&n)
	if err != nil {
		e.t.Fatalf("replay the outbox: %v", err)
	}
	for shard := range 2 {
		if _, err := e.db().Exec(context.Background(), `SELECT pg_notify($1, $2)`, storage.OutboxChannel, strconv.Itoa(shard)); err != nil {
			e.t.Fatal(err)
		}
	}
	return n
}

// service is one running in-process instance of run().
type service struct {
	base   string
	cancel context.CancelFunc
	done   chan error
	logs   *storagetest.SyncBuffer
}

// testClock is a clock of periods that stands still until the test moves it.
type testClock struct{ ns atomic.Int64 }

func (c *testClock) now() time.Time { return time.Unix(0, c.ns.Load()) }

// set moves the clock to t.
func (c *testClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// dayClock is the real clock, set back an hour when the test starts in the last 15
// minutes of a UTC day (or ISO week): a test that names today's period (or this week's)
// finds the service in the same one however long it runs.
func dayClock() func() time.Time {
	now := time.Now().UTC()
	var shift time.Duration
	if midnight := now.Truncate(24 * time.Hour).Add(24 * time.Hour); midnight.Sub(now) < 15*time.Minute {
		shift = time.Hour
	}
	return func() time.Time { return time.Now().Add(-shift) }
}

// start runs the service in-process on the real clock and waits until /readyz answers 200.
func (e *testEnv) start(overrides map[string]string) *service {
	e.t.Helper()
	return e.startWith(overrides, time.Now)
}

// startWith runs the service with a clock of periods and waits until /readyz answers 200.
func (e *testEnv) startWith(overrides map[string]string, now func() time.Time) *service {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &service{cancel: cancel, done: make(chan error, 1), logs: &storagetest.SyncBuffer{}}
	getenv := e.getenv(overrides)
	s.base = "http://" + getenv("LEADERBOARD_HTTP_ADDR")
	go func() { s.done <- runWith(ctx, nil, getenv, s.logs, now) }()
	e.t.Cleanup(func() { s.stop(e.t) })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			s.done <- err
			e.t.Fatalf("service exited during start: %v\n%s", err, s.logs.String())
		default:
		}
		if resp, err := http.Get(s.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("service not ready after 30 s\n%s", s.logs.String())
	return nil
}

// stop cancels the service and waits for a clean exit.
func (s *service) stop(t *testing.T) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("service stopped with error: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Errorf("service did not stop within 40 s")
	}
}

// portsGiven are the ports freePort handed out in this test run.
var portsGiven = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// freePort returns a port nothing listens on, below the kernel's ephemeral range (so no
// outgoing connection takes it before the service binds it), never the same twice.
func freePort(t *testing.T) string {
	t.Helper()
	portsGiven.Lock()
	defer portsGiven.Unlock()
	for range 1000 {
		p := 20000 + rand.IntN(12000)
		if portsGiven.m[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		portsGiven.m[p] = true
		return fmt.Sprint(p)
	}
	t.Fatal("no free port")
	return ""
}

func mintToken(t *testing.T, sub string, roles ...string) string {
	t.Helper()
	return signToken(t, lbhttp.Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))},
		Name:             "Player " + sub, Roles: roles,
	})
}

func signToken(t *testing.T, c lbhttp.Claims) string {
	t.Helper()
	return signTokenWith(t, testSecret, c)
}

func signTokenWith(t *testing.T, secret string, c lbhttp.Claims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (s *service) do(t *testing.T, method, path, tok, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func (s *service) submit(t *testing.T, tok, body string) response {
	t.Helper()
	return s.do(t, http.MethodPost, "/v1/scores", tok, body)
}

// metricsShow waits until /metrics has every one of the given series, written as
// printed: `name{labels}` must be present, `name{labels} value` must have exactly that
// value. The projector counts an event just after Redis shows it, so one scrape right
// after a read can be a moment early.
func metricsShow(t *testing.T, s *service, series ...string) {
	t.Helper()
	eventually(t, 20*time.Second, func() string {
		got := scrape(t, s)
		for _, want := range series {
			name, value, hasValue := want, 0.0, false
			if i := strings.LastIndexByte(want, ' '); i > 0 {
				v, err := strconv.ParseFloat(want[i+1:], 64)
				if err != nil {
					t.Fatalf("metricsShow: bad value in %q", want)
				}
				name, value, hasValue = want[:i], v, true
			}
			if v, ok := got[name]; !ok || hasValue && v != value {
				return fmt.Sprintf("/metrics has %s = %v (present %v), want %q", name, v, ok, want)
			}
		}
		return ""
	})
}

// eventually retries check until it returns "" or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, check func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if last = check(); last == "" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("condition not met after %v: %s", timeout, last)
}

// hasText reports whether a decoded JSON field is a non-empty string (a missing field is
// nil, which an == "" check would let pass).
func hasText(v any) bool {
	s, ok := v.(string)
	return ok && s != ""
}

func num(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

func mustConfig(t *testing.T, e *testEnv) configs.Config {
	t.Helper()
	cfg, err := configs.Load(e.getenv(nil))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// storedValue is what Redis holds of a user's entry on a board period, loaded or not.
func storedValue(t *testing.T, env *testEnv, board, period, user string) storage.Value {
	t.Helper()
	v, err := storage.NewBoards(env.rdb, env.prefix, 0).ReadValues(context.Background(), []storage.ValueKey{{Board: board, Period: period, UserID: user}})
	if err != nil {
		t.Fatal(err)
	}
	return v[0]
}
