package main

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

// TestShutdownWhileKafkaHangs: the broker's host stops answering (its process frozen with
// SIGSTOP: TCP connects still complete, nothing is ever answered) while writes flow, and
// the operator stops the service. The stop is bounded (it once took more than ten
// minutes: sarama's produce, its consumer group's release and the publishers' close take
// no context, and each attempt waits out a read timeout). Then the broker answers again
// and the service starts on the same state: every acknowledged write is applied exactly
// once (what the stop left behind is forwarded again and found applied).
func TestShutdownWhileKafkaHangs(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	brokerAddr, dataDir := "127.0.0.1:"+freePort(t), t.TempDir()
	kafka := startProcess(t, env, nil, "", "broker", "-addr", brokerAddr, "-data-dir", dataDir)
	waitTCP(t, brokerAddr)
	t.Cleanup(func() { _ = kafka.cmd.Process.Signal(syscall.SIGCONT) })

	getenv := env.getenv(map[string]string{"LEADERBOARD_KAFKA_BROKERS": brokerAddr})
	base := "http://" + getenv("LEADERBOARD_HTTP_ADDR")
	svc := &service{base: base}
	start := func() (context.CancelFunc, chan error, *storagetest.SyncBuffer) {
		ctx, cancel := context.WithCancel(context.Background())
		logs := &storagetest.SyncBuffer{}
		done := make(chan error, 1)
		go func() { done <- runWith(ctx, nil, getenv, logs, time.Now) }()
		eventually(t, 30*time.Second, func() string {
			if r, err := httpGetStatus(base + "/readyz"); err != nil || r != 200 {
				return "not ready"
			}
			return ""
		})
		return cancel, done, logs
	}
	cancel, done, logs := start()
	srv := mintToken(t, "gs", "server")
	if r := svc.do(t, "POST", "/v1/scores?wait=true", srv, `{"score": 1, "user_id": "before", "event_id": "kb-0"}`); r.status != 200 {
		t.Fatalf("write before: %d %s", r.status, r.raw)
	}
	w := startWriter(t, func() string { return base }, 4)
	time.Sleep(time.Second)
	_ = kafka.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(2 * time.Second) // writes keep coming; the relay's produce is now in flight

	stopAt := time.Now()
	cancel()
	select {
	case err := <-done:
		if took := time.Since(stopAt); took > 25*time.Second || err != nil {
			t.Errorf("the service stopped in %v (%v) while Kafka hung, want within 25 s and no error", took.Round(time.Second), err)
		}
	case <-time.After(40 * time.Second):
		var dump bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
		var stuck []string
		for _, g := range strings.Split(dump.String(), "\n\n") {
			if strings.Contains(g, "openleaderboard/leaderboard/") && !strings.Contains(g, "_test.go") {
				stuck = append(stuck, g)
			}
		}
		_ = kafka.cmd.Process.Signal(syscall.SIGCONT) // lets it stop, so the test cleans up
		t.Fatalf("the service did not stop within 40 s of its context's end while Kafka hung; stuck in:\n%s\n%s",
			strings.Join(stuck, "\n\n"), tail(logs.String(), 3000))
	}

	_ = kafka.cmd.Process.Signal(syscall.SIGCONT)
	cancel, done, _ = start()
	defer func() {
		cancel()
		<-done
	}()
	if n := w.finish(); n == 0 {
		t.Fatal("no write was acknowledged")
	}
	w.checkExactlyOnce(t, env, func() string { return base }, time.Minute)
}
