package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

// TestShutdownWithPostgresBlackHoled: PostgreSQL's open connections stop answering (a
// network partition, a failover that moved the server's address) and the service is told
// to stop. Every call the service makes on its way out must be bounded, so it stops within
// its HTTP drain timeout (15 s) and a few seconds more; new connections still go through.
// The relay's outbox listener, once its WaitForNotification is cancelled, sends
// "UNLISTEN *" on the same connection with context.WithoutCancel and no deadline
// (storage/outbox_relay.go, Listen): on a black-holed connection it waits until TCP gives
// up (about 15 minutes; here forever), Relay.Run never returns, and neither does serve
// (and pool.Close would then wait for that acquired connection too). Found by a review.
func TestShutdownWithPostgresBlackHoled(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newStallProxy(t, testPostgresHost(t))
	pgURL, _ := url.Parse(env.vars["LEADERBOARD_POSTGRES_URL"])
	pgURL.Host = px.addr()
	svc := env.start(map[string]string{"LEADERBOARD_POSTGRES_URL": pgURL.String()})
	srv := mintToken(t, "gs", "server")
	if r := svc.do(t, "POST", "/v1/scores?wait=true", srv, `{"score": 1, "user_id": "before", "event_id": "sd-0"}`); r.status != 200 {
		t.Fatalf("write before: %d %s", r.status, r.raw)
	}
	px.stallOpen()
	time.Sleep(500 * time.Millisecond) // the listener is back in WaitForNotification

	cancel := svc.cancel
	svc.cancel = nil // this test waits for the stop itself
	start := time.Now()
	cancel()
	select {
	case err := <-svc.done:
		t.Logf("stopped in %v (err %v)", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(30 * time.Second):
		var dump bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
		var stuck []string
		for _, g := range strings.Split(dump.String(), "\n\n") {
			if strings.Contains(g, "openleaderboard/leaderboard/storage.") || strings.Contains(g, "leaderboard.serve") {
				stuck = append(stuck, g)
			}
		}
		t.Fatalf("the service did not stop within 30 s of its context's end while PostgreSQL's open connections were black-holed; stuck in:\n%s",
			strings.Join(stuck, "\n\n"))
	}
}

// TestStartFailureAfterTheRelayStartedExits: a process running the relay and the API whose
// API part fails to start (here its ban list cannot be read; as well PostgreSQL failing
// between the migrations and bans.Load) must exit with the error. serve returns from
// startAPI's error without cancelling the errgroup's context or waiting for it: the relay
// (and the projector) started before go on, holding the shards' advisory locks and the
// outbox listener's pooled connection, and the deferred closeDeps then blocks in
// pool.Close, which waits for that connection forever. The process neither serves nor
// exits. Found by a review.
func TestStartFailureAfterTheRelayStartedExits(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	svc.stop(t)
	if _, err := env.db().Exec(context.Background(), `DELETE FROM user_bans_state`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &storagetest.SyncBuffer{}
	done := make(chan error, 1)
	go func() { done <- runWith(ctx, nil, env.getenv(nil), logs, time.Now) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the service started without its ban list")
		}
		t.Logf("exited with: %v", err)
	case <-time.After(30 * time.Second):
		var dump bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
		var stuck []string
		for _, g := range strings.Split(dump.String(), "\n\n") {
			if strings.Contains(g, "leaderboard.serve") || strings.Contains(g, "router.(*Relay)") {
				stuck = append(stuck, g)
			}
		}
		cancel() // lets the relay, and so serve, end
		<-done
		t.Fatalf("the service neither served nor exited 30 s after its API failed to start; stuck in:\n%s\nlogs:\n%s",
			strings.Join(stuck, "\n\n"), tail(logs.String(), 2000))
	}
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// blockedPool is a pool whose Close does not return until released.
type blockedPool struct{ release chan struct{} }

func (p blockedPool) Close() { <-p.release }

// TestStopDoesNotWaitForPostgresConnectionsClosing: pgx closes a connection whose query
// was cancelled by reading the old connection's answer for up to 15 s, and pool.Close waits
// for each; on connections that no longer answer, the stop waited for them (17 s with
// one, past 30 s in a busy run of TestShutdownWithPostgresBlackHoled). The stop waits at
// most poolCloseWait for the pool, and says so.
func TestStopDoesNotWaitForPostgresConnectionsClosing(t *testing.T) {
	t.Parallel()
	p := blockedPool{release: make(chan struct{})}
	defer close(p.release)
	logs := &storagetest.SyncBuffer{}
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		closePool(p, slog.New(slog.NewJSONHandler(logs, nil)))
	}()
	select {
	case <-closed:
		if took := time.Since(start); took < poolCloseWait {
			t.Errorf("closing a pool whose connections do not close took %v, want %v", took, poolCloseWait)
		}
	case <-time.After(poolCloseWait + 5*time.Second):
		t.Fatalf("closing a pool whose connections do not close has not returned in %v", time.Since(start).Round(time.Second))
	}
	if !strings.Contains(logs.String(), "still closing") {
		t.Errorf("no warning that the pool was left closing: %s", logs.String())
	}
}
