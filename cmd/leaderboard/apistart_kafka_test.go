package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

// silentBroker accepts TCP connections and never answers: a Kafka whose host stopped
// answering (a partition, a powered-off VM, a security group dropping packets), which is
// how an outage usually looks from a client, rather than a refused connection.
func silentBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never read or written
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestAPIOnlyStartsWhileKafkaDoesNotAnswer: an API-only process is to start, and be ready,
// while Kafka is down (commit 600388b, "An API-only process does without Kafka"). openDeps still
// calls router.EnsureTopics synchronously before any role starts, with sarama's defaults
// (30 s read and dial timeouts, 3 metadata retries): against brokers that do not answer
// (rather than refuse) the process serves nothing, not even /readyz, for minutes, and an
// orchestrator's startup probe kills it. TestBrokerOutage only covers a refused
// connection (a killed broker on localhost), which fails at once. Found by a review.
func TestAPIOnlyStartsWhileKafkaDoesNotAnswer(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	broker := silentBroker(t)
	addr := "127.0.0.1:" + freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	logs := &storagetest.SyncBuffer{}
	done := make(chan error, 1)
	started := time.Now()
	go func() {
		done <- runWith(ctx, nil, env.getenv(map[string]string{"LEADERBOARD_ROLES": "api",
			"LEADERBOARD_KAFKA_BROKERS": broker, "LEADERBOARD_HTTP_ADDR": addr}), logs, time.Now)
	}()
	defer func() {
		cancel()
		select { // a fixed service stops at once; the one stuck in EnsureTopics is left behind
		case <-done:
		case <-time.After(20 * time.Second):
		}
	}()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("the API-only process exited: %v\n%s", err, tail(logs.String(), 2000))
		default:
		}
		if resp, err := client.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Logf("ready %v after start", time.Since(started).Round(time.Millisecond))
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	var dump bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&dump, 2)
	var stuck []string
	for _, g := range strings.Split(dump.String(), "\n\n") {
		if strings.Contains(g, "leaderboard.openDeps") {
			stuck = append(stuck, g)
		}
	}
	t.Fatalf("an API-only process whose Kafka does not answer was not ready %v after it started; stuck in:\n%s\nlogs:\n%s",
		time.Since(started).Round(time.Second), strings.Join(stuck, "\n\n"), tail(logs.String(), 2000))
}
