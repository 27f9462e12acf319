package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPostgresReadsTakeTurns: reads of a period Redis does not keep are answered from
// PostgreSQL, and a friends read of a big closed day numbers the whole day there. One
// player's token on 16 connections kept two PostgreSQL cores busy and made other players'
// reads of closed days five times slower (found by a review). A user's reads from
// PostgreSQL now run one at a time (a second waits, then is 429 rate_limited), and the
// process runs at most LEADERBOARD_POSTGRES_READS of them (then 503 with Retry-After).
// board_entries is held locked so that the first reads stay in PostgreSQL.
func TestPostgresReadsTakeTurns(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := &testClock{}
	clock.set(time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC))
	svc := env.startWith(map[string]string{"LEADERBOARD_POSTGRES_READS": "2"}, clock.now)
	for i, u := range []string{"pa", "pb", "pc"} {
		writeAs(t, svc, "daily", u, 10+i)
	}
	clock.set(time.Date(2026, 5, 7, 2, 0, 0, 0, time.UTC)) // Redis keeps the day and 2 before
	const path = "/v1/boards/daily/users/%s?period=2026-05-04"
	if r := svc.do(t, http.MethodGet, fmt.Sprintf(path, "pa"), mintToken(t, "pa"), ""); r.status != 200 || num(r.body["rank"]) != 3 {
		t.Fatalf("a read of the closed day: %d %s", r.status, r.raw)
	}
	read := func(user string, out chan<- timedAnswer) {
		a := timedDo(t, svc, http.MethodGet, fmt.Sprintf(path, user), mintToken(t, user), "")
		a.user = user
		out <- a
	}

	unlock := lockTable(t, env, "board_entries")
	held := make(chan timedAnswer, 2)
	go read("pa", held)
	waitInPostgres(t, env, 1, "%FROM board_entries%")
	go read("pb", held) // another user's read takes the second slot
	waitInPostgres(t, env, 2, "%FROM board_entries%")

	refused := make(chan timedAnswer, 2)
	go read("pa", refused) // pa's second read waits for pa's first
	go read("pc", refused) // pc waits for a slot
	want := map[string]int{"pa": http.StatusTooManyRequests, "pc": http.StatusServiceUnavailable}
	for range 2 {
		a := <-refused
		if a.status != want[a.user] || a.retryAfter != "1" {
			t.Errorf("%s: %d Retry-After %q after %s, want %d with Retry-After 1", a.user, a.status, a.retryAfter, a.took, want[a.user])
		}
	}
	unlock()
	for range 2 {
		if a := <-held; a.status != 200 {
			t.Errorf("%s's read that held a slot: %d, want 200 once PostgreSQL answers", a.user, a.status)
		}
	}
	// The slots are given back: every user reads again.
	for _, u := range []string{"pa", "pb", "pc"} {
		if r := svc.do(t, http.MethodGet, fmt.Sprintf(path, u), mintToken(t, u), ""); r.status != 200 {
			t.Errorf("%s after: %d %s", u, r.status, r.raw)
		}
	}
}

// TestWritesAndServersSkipPlayersTurns: the turns bound players' reads, not the write
// path, and not a game server's token, which reads for many players. A review found a
// retry of a write answered unchanged, while Redis was down, waited 5 s for other users'
// reads and was answered 503 (it was 200 unchanged), and a game server's second read 429
// while its first ran. The users table is held locked so that top reads (which name the
// entries' users) stay in PostgreSQL and keep their turns.
func TestWritesAndServersSkipPlayersTurns(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newProxy(t, testRedis)
	svc := env.start(map[string]string{"LEADERBOARD_REDIS_URL": "redis://" + px.addr() + "/0", "LEADERBOARD_POSTGRES_READS": "3"})
	tok := mintToken(t, "sk-u")
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", tok, `{"score": 100, "event_id": "sk-high"}`); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	if r := svc.submit(t, tok, `{"score": 50, "event_id": "sk-low"}`); r.status != 200 || r.body["status"] != "unchanged" {
		t.Fatalf("a lower score: %d %s", r.status, r.raw)
	}
	px.setDown(true)

	unlock := lockTable(t, env, "users")
	held := make(chan timedAnswer, 3)
	srv := mintToken(t, "sk-game-server", "server")
	top := func(tok string) { held <- timedDo(t, svc, http.MethodGet, "/v1/leaderboard/top", tok, "") }
	go top(mintToken(t, "sk-holder"))
	go top(srv)
	waitInPostgres(t, env, 2, "%users%")
	// The game server's next read takes the third turn, not a place behind its first.
	if a := timedDo(t, svc, http.MethodGet, "/v1/leaderboard/users/sk-u", srv, ""); a.status != 200 {
		t.Errorf("a game server's read while its other read runs: %d %s after %s, want 200", a.status, a.raw, a.took.Round(time.Millisecond))
	}
	go top(mintToken(t, "sk-holder-2"))
	waitInPostgres(t, env, 3, "%users%")
	// Every turn is taken: a write's answer reads PostgreSQL at once all the same.
	if a := timedDo(t, svc, http.MethodPost, "/v1/scores", tok, `{"score": 50, "event_id": "sk-low"}`); a.status != 200 || !strings.Contains(a.raw, `"unchanged"`) {
		t.Errorf("the retry of the write answered unchanged, Redis down, every turn taken: %d %s after %s, want 200 unchanged", a.status, a.raw, a.took.Round(time.Millisecond))
	}
	unlock()
	for range 3 {
		if a := <-held; a.status != 200 {
			t.Errorf("a read that held a turn: %d %s", a.status, a.raw)
		}
	}
}

// lockTable holds table locked (ACCESS EXCLUSIVE) until the returned func (or the test's
// end): the service's queries of it wait in PostgreSQL meanwhile.
func lockTable(t *testing.T, env *testEnv, table string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := env.db().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := tx.Rollback(ctx); err != nil {
			t.Error(err)
		}
	}
}

// waitInPostgres waits until at least n queries of the test's database matching like wait
// for a lock.
func waitInPostgres(t *testing.T, env *testEnv, n int, like string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got int
		if err := env.db().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`, like).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d queries like %q wait in PostgreSQL, want %d", got, like, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// timedAnswer is one request's answer and how long it took (user: the caller's to set).
type timedAnswer struct {
	user, retryAfter, raw string
	status                int
	took                  time.Duration
}

// timedDo sends one request with the token; safe in a goroutine of the test (an error
// fails the test and answers status 0).
func timedDo(t *testing.T, svc *service, method, path, tok, body string) timedAnswer {
	start := time.Now()
	req, err := http.NewRequest(method, svc.base+path, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return timedAnswer{}
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	var a timedAnswer
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Error(err)
		return a
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.retryAfter, a.raw, a.status, a.took = resp.Header.Get("Retry-After"), string(raw), resp.StatusCode, time.Since(start)
	return a
}
