package router

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/openleaderboard/leaderboard/storage"
)

// heldProducer is a producer whose sends wait until released and that records a Close
// made while a send still ran: sarama's Close closes the channel such a send is feeding,
// and the send panics ("send on closed channel"), taking the process down.
type heldProducer struct {
	sarama.SyncProducer // the real one: every call but these two
	release             chan struct{}
	sendStarted         chan struct{}
	once                sync.Once

	mu            sync.Mutex
	sends         int
	closedInASend bool
	closed        chan struct{}
}

func (p *heldProducer) SendMessages(msgs []*sarama.ProducerMessage) error {
	p.mu.Lock()
	p.sends++
	p.mu.Unlock()
	p.once.Do(func() { close(p.sendStarted) })
	<-p.release
	p.mu.Lock()
	p.sends--
	p.mu.Unlock()
	return p.SyncProducer.SendMessages(msgs)
}

func (p *heldProducer) Close() error {
	p.mu.Lock()
	p.closedInASend = p.sends > 0
	p.mu.Unlock()
	defer close(p.closed)
	return p.SyncProducer.Close()
}

// TestRelayStopsWithoutClosingTheProducerUnderASend: the relay stops while a produce it
// has given up on (its context ended) still runs. It closes the producer only once that
// send has returned; a send that never returns within the bound keeps the producer open.
// (Its Close ran at once, under the send: a panic in make test, 2026-11-27.)
func TestRelayStopsWithoutClosingTheProducerUnderASend(t *testing.T) {
	ctx, pool, schema, broker, topics := newRelayEnv(t, "relay-close-held")
	outbox := storage.NewOutboxMaintenance(pool, schema)
	insert := outboxInserter(ctx, t, pool, schema)
	r, err := NewRelay(outbox, RelayConfig{Shards: 1, Brokers: broker.Addrs(), Topic: topics.Scores, IdleInterval: 50 * time.Millisecond}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	held := &heldProducer{SyncProducer: r.producer, release: make(chan struct{}), sendStarted: make(chan struct{}), closed: make(chan struct{})}
	r.producer = held
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	<-r.Running()
	insert("a")
	select {
	case <-held.sendStarted:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not produce")
	}
	stop() // the shard gives up on its send; Run returns and closes the producer
	time.Sleep(500 * time.Millisecond)
	close(held.release) // the send given up on returns now
	select {
	case <-held.closed:
	case <-time.After(closeTimeout + 5*time.Second):
		t.Fatal("the producer was never closed once its send had returned")
	}
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	held.mu.Lock()
	defer held.mu.Unlock()
	if held.closedInASend {
		t.Error("the relay closed its producer while a send it had given up on still ran (sarama's send then panics)")
	}
}
