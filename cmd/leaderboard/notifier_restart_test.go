package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/openleaderboard/leaderboard/router"
)

// goroutinesIn counts the goroutines whose stack holds fn.
func goroutinesIn(fn string) (int, string) {
	var dump bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&dump, 2) // one block per goroutine
	n, example := 0, ""
	for _, g := range strings.Split(dump.String(), "\n\n") {
		if strings.Contains(g, fn) {
			n++
			example = g
		}
	}
	return n, example
}

// TestNotifierRestartsDoNotLeakWhileKafkaIsDown: an API-only process now starts while
// Kafka is unreachable and runNotifier builds a new watermill router every second until
// Kafka answers. Each router's Run fails in RunHandlers (the subscriber cannot reach a
// broker) after watchAllHandlersStopped started a goroutine that waits on the router's
// handlersWg, which AddConsumerHandler raised and no handler will ever lower: one goroutine
// (and the router, its handlers and subscribers it keeps alive) is leaked per attempt,
// 86,400 a day of outage or of a misconfigured LEADERBOARD_KAFKA_BROKERS, and none ends
// with the process's context. Found by a review.
func TestNotifierRestartsDoNotLeakWhileKafkaIsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there: connection refused

	const fn = "watermill/message.(*Router).watchAllHandlersStopped"
	before, _ := goroutinesIn(fn)
	d := deps{brokers: []string{dead}, topics: router.NewTopics("review28", 1), reg: prometheus.NewRegistry(),
		logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); runNotifier(ctx, d, nil) }()
	time.Sleep(6 * time.Second) // several attempts, a second apart
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("runNotifier did not return after its context ended")
	}
	time.Sleep(time.Second)
	after, example := goroutinesIn(fn)
	if leaked := after - before; leaked > 0 {
		t.Fatalf("%d goroutines left in %s after 6 s of Kafka down and runNotifier returned (one per restart, never ending):\n%s",
			leaked, fn, example)
	}
}

// TestNotifierRestartsDoNotLeakKafkaClientsWhileTopicsAreMissing: Kafka answers but the
// notification topics do not exist (an API-only process started during an outage, so it
// did not create them, and Kafka came back empty; or its LEADERBOARD_TOPIC_PREFIX differs
// from the projector's). Each attempt of runNotifier opens a sarama client
// (watermill-kafka's consumeMessages) whose Partitions call fails; that client is never
// closed, so every second leaks a client, its metadata goroutine and its broker
// connection, for as long as the topics are missing. Found by a review.
func TestNotifierRestartsDoNotLeakKafkaClientsWhileTopicsAreMissing(t *testing.T) {
	broker, err := router.StartEmbeddedKafka("", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	const fn = "sarama.(*client).backgroundMetadataUpdater"
	before, _ := goroutinesIn(fn)
	d := deps{brokers: broker.Addrs(), topics: router.NewTopics("review28-missing", 1), reg: prometheus.NewRegistry(),
		logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); runNotifier(ctx, d, nil) }()
	time.Sleep(6 * time.Second)
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("runNotifier did not return after its context ended")
	}
	time.Sleep(2 * time.Second)
	after, example := goroutinesIn(fn)
	if leaked := after - before; leaked > 0 {
		t.Fatalf("%d sarama clients still open (%s) after 6 s of missing topics and runNotifier returned:\n%s", leaked, fn, example)
	}
}
