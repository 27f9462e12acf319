package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// TestStuckPartitionMovedToAnotherReplicaClears: a projector replica fails (transient
// errors) on messages of both its partitions; a second replica joins the group and one of
// the partitions moves there, where its messages apply. Then the first replica's outage
// ends and its remaining partition applies too. Nothing is stuck any more anywhere, so
// the first replica's tracker (leaderboard_projector_stuck_seconds, /readyz) is back to
// 0: the partition it no longer owns does not keep it stuck forever (it did: found by a
// review).
func TestStuckPartitionMovedToAnotherReplicaClears(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topics := NewTopics("stuck-review2", 2)
	if err := EnsureTopics(context.Background(), broker.Addrs(), topics); err != nil {
		t.Fatal(err)
	}
	pub, err := NewKafkaPublisher(broker.Addrs(), NewLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for i := range 8 {
		msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprint(i)))
		msg.Metadata.Set("partition_key", fmt.Sprintf("k%d", i))
		if err := pub.Publish(topics.Scores, msg); err != nil {
			t.Fatal(err)
		}
	}

	stuckA := NewStuckPartitions(time.Now)
	var failing atomic.Bool
	failing.Store(true)
	handlerA := stuckA.Middleware(func(*message.Message) ([]*message.Message, error) {
		if failing.Load() {
			return nil, errors.New("postgres down")
		}
		return nil, nil
	})
	a, err := NewKafkaSubscriber(broker.Addrs(), "stuck-review2", 8, NewLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	a.OnRelease(stuckA.Release) // as the projector wires it
	outA, err := a.Subscribe(context.Background(), topics.Scores)
	if err != nil {
		t.Fatal(err)
	}
	var applied atomic.Int64
	run := func(out <-chan *message.Message, h message.HandlerFunc) {
		for m := range out {
			go func() {
				if _, err := h(m); err != nil {
					m.Nack()
					return
				}
				applied.Add(1)
				m.Ack()
			}()
		}
	}
	go run(outA, handlerA)

	deadline := time.Now().Add(30 * time.Second)
	for {
		stuckA.mu.Lock()
		n := len(stuckA.stuck)
		stuckA.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica A is stuck on %d partitions, want both", n)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Replica B joins: one partition moves there, and it applies its messages.
	_, outB := subscribe(t, broker, topics, "stuck-review2", 8)
	go run(outB, func(*message.Message) ([]*message.Message, error) { return nil, nil })
	for a.drains.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("replica A's partitions were not revoked within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A's outage ends; every message is applied by one replica or the other.
	failing.Store(false)
	deadline = time.Now().Add(30 * time.Second)
	for applied.Load() < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 8 messages applied within 30 s", applied.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if l := stuckA.Longest(); l != 0 {
		stuckA.mu.Lock()
		defer stuckA.mu.Unlock()
		t.Fatalf("every message is applied, yet replica A still reports a partition stuck for %v: %v", l, stuckA.stuck)
	}
}
