package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/openleaderboard/leaderboard/handlers"
)

// capture is a dead-letter publisher that records what it is given.
type capture struct {
	mu   sync.Mutex
	msgs []*message.Message
}

func (c *capture) Publish(_ string, msgs ...*message.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, msgs...)
	return nil
}

func (c *capture) Close() error { return nil }

func (c *capture) reasons() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for _, m := range c.msgs {
		out[m.UUID] = m.Metadata.Get("reason_poisoned")
	}
	return out
}

// TestProjectorMiddleware runs the projector's router against the in-process Kafka
// broker: permanent errors (tried once, never retried) and panics are dead-lettered; a
// transient error is retried until it succeeds and is never dead-lettered.
func TestProjectorMiddleware(t *testing.T) {
	broker, err := StartEmbeddedKafka("", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	topics := NewTopics("mw-test", 3)
	if err := EnsureTopics(context.Background(), broker.Addrs(), topics); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	var transientFailures, permanentAttempts atomic.Int32
	var succeeded sync.Map
	handle := func(msg *message.Message) error {
		switch string(msg.Payload) {
		case "permanent":
			permanentAttempts.Add(1)
			return handlers.Permanent(errors.New("bad payload"))
		case "panic":
			panic("handler bug")
		case "transient":
			if transientFailures.Add(1) <= 6 { // more than one Retry cycle: it must come back after a Nack too
				return fmt.Errorf("redis: %w", context.DeadlineExceeded)
			}
		}
		succeeded.Store(msg.UUID, true)
		return nil
	}
	dead := &capture{}
	stuck := NewStuckPartitions(time.Now)
	sub, err := NewKafkaSubscriber(broker.Addrs(), "mw-test-group", 4, NewLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewProjectorRouter(sub, topics.Scores, handle, dead, stuck, Throttle{}, nil, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()

	pub, err := NewKafkaPublisher(broker.Addrs(), NewLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for _, body := range []string{"permanent", "panic", "transient", "fine"} {
		msg := message.NewMessage(body, []byte(body))
		msg.Metadata.Set("partition_key", body)
		if err := pub.Publish(topics.Scores, msg); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		_, okT := succeeded.Load("transient")
		_, okF := succeeded.Load("fine")
		if okT && okF && len(dead.reasons()) >= 2 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	reasons := dead.reasons()
	if len(reasons) != 2 || reasons["permanent"] == "" || reasons["panic"] == "" {
		t.Fatalf("dead letters %v, want exactly the permanent and the panicking message", reasons)
	}
	if _, ok := succeeded.Load("transient"); !ok {
		t.Fatalf("transient failure was not retried to success (%d attempts)", transientFailures.Load())
	}
	if _, ok := succeeded.Load("fine"); !ok {
		t.Fatal("healthy message not handled")
	}
	if n := permanentAttempts.Load(); n != 1 {
		t.Fatalf("permanent failure handled %d times, want 1: it must not be retried", n)
	}
	if n := transientFailures.Load(); n < 7 {
		t.Fatalf("transient message handled %d times, want retries until success", n)
	}
}

// TestProjectorThrottle: with a throttle of 20 messages a second, 60 messages spread over
// every partition take about 3 s to handle, however fast the handler is.
func TestProjectorThrottle(t *testing.T) {
	t.Parallel()
	broker, err := StartEmbeddedKafka("", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	topics := NewTopics("throttle-test", 6)
	if err := EnsureTopics(context.Background(), broker.Addrs(), topics); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	pub, err := NewKafkaPublisher(broker.Addrs(), NewLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	const n = 60
	for i := range n { // published first: the consumer finds a backlog, as after an outage
		msg := message.NewMessage(fmt.Sprintf("m-%d", i), []byte("x"))
		msg.Metadata.Set("partition_key", fmt.Sprintf("user-%d", i))
		if err := pub.Publish(topics.Scores, msg); err != nil {
			t.Fatal(err)
		}
	}
	var handled atomic.Int32
	var first, last atomic.Int64
	handle := func(*message.Message) error {
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		last.Store(now)
		handled.Add(1)
		return nil
	}
	sub, err := NewKafkaSubscriber(broker.Addrs(), "throttle-group", 4, NewLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewProjectorRouter(sub, topics.Scores, handle, &capture{}, nil, Throttle{N: 20, Per: time.Second}, nil, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for handled.Load() < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if handled.Load() < n {
		t.Fatalf("handled %d of %d", handled.Load(), n)
	}
	// 60 messages at one every 50 ms: at least 59 intervals between the first and the last.
	if took := time.Duration(last.Load() - first.Load()); took < 2500*time.Millisecond {
		t.Fatalf("%d messages handled in %v: the cap of 20/s does not hold", n, took)
	}
}

// TestRelayPacer: the relay's throttle lets at most rate messages a second through.
func TestRelayPacer(t *testing.T) {
	t.Parallel()
	p := newPacer(200)
	start := time.Now()
	for range 5 {
		p.wait(context.Background(), 100) // 500 messages at 200/s: the fifth batch waits 2 s
	}
	if took := time.Since(start); took < 1900*time.Millisecond {
		t.Fatalf("500 messages went in %v at a cap of 200/s", took)
	}
	if p := newPacer(0); p != nil {
		start := time.Now()
		p.wait(context.Background(), 1_000_000)
		if time.Since(start) > time.Second {
			t.Fatal("no cap waited")
		}
	}
}

// TestProjectorRetriesFailedAttempts drives the projector's middleware chain with
// handlers that fail: a transient failure is retried after Retry's first wait (100 ms ±
// 20 %), one that keeps failing gets 4 retries and its error back (redelivered, never
// dead-lettered), a permanent one no retry and goes to the dead letters, and a message
// whose context has ended gets no attempt. The first attempt runs outside Retry
// (retryFailures); this shows Retry then behaves as if it had made it.
func TestProjectorRetriesFailedAttempts(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	dead := &capture{}
	poison, err := middleware.PoisonQueueWithFilter(dead, DeadLetterTopic, shouldPoison)
	if err != nil {
		t.Fatal(err)
	}
	chain := projectorMiddleware(poison, NewLogger(logger), logger)
	transient := errors.New("PostgreSQL unavailable")
	run := func(ctx context.Context, fail func(attempt int) error) (attempts []time.Time, err error) {
		var h message.HandlerFunc = func(*message.Message) ([]*message.Message, error) {
			attempts = append(attempts, time.Now())
			return nil, fail(len(attempts))
		}
		for i := len(chain) - 1; i >= 0; i-- {
			h = chain[i](h)
		}
		msg := message.NewMessage("m", []byte("{}"))
		msg.SetContext(ctx)
		_, err = h(msg)
		return attempts, err
	}

	at, err := run(t.Context(), func(n int) error {
		if n == 1 {
			return transient
		}
		return nil
	})
	if err != nil || len(at) != 2 {
		t.Fatalf("failing once: %d attempts, %v; want 2, nil", len(at), err)
	}
	if wait := at[1].Sub(at[0]); wait < 80*time.Millisecond {
		t.Fatalf("retried after %v, want Retry's first wait (100 ms ± 20 %%)", wait)
	}

	at, err = run(t.Context(), func(int) error { return transient })
	if !errors.Is(err, transient) || len(at) != 5 {
		t.Fatalf("failing always: %d attempts, %v; want 5 (4 retries) and the error", len(at), err)
	}
	if wait := at[4].Sub(at[0]); wait < 1200*time.Millisecond {
		t.Fatalf("4 retries within %v, want Retry's waits (100 + 200 + 400 + 800 ms ± 20 %%)", wait)
	}

	at, err = run(t.Context(), func(int) error { return handlers.Permanent(errors.New("malformed")) })
	if err != nil || len(at) != 1 || len(dead.reasons()) != 1 {
		t.Fatalf("a permanent failure: %d attempts, %v, %d dead letters; want 1 attempt, dead-lettered", len(at), err, len(dead.reasons()))
	}

	ended, cancel := context.WithCancel(t.Context())
	cancel()
	at, err = run(ended, func(int) error { return nil })
	if !errors.Is(err, context.Canceled) || len(at) != 0 {
		t.Fatalf("context ended: %d attempts, %v; want none, context canceled", len(at), err)
	}

	// A permanent failure whose context ended during its attempt (a rebalance took the
	// partition) is still dead-lettered, as Retry did: it checks the context only before
	// an attempt.
	ending, cancel := context.WithCancel(t.Context())
	at, err = run(ending, func(int) error {
		cancel()
		return handlers.Permanent(errors.New("malformed"))
	})
	if err != nil || len(at) != 1 || len(dead.msgs) != 2 {
		t.Fatalf("a permanent failure as its context ended: %d attempts, %v, %d dead letters; want 1 attempt, dead-lettered", len(at), err, len(dead.msgs))
	}
}

// TestRetryFailuresCountsTheFirstAttempt: Retry's MaxElapsedTime runs from the first
// attempt, which retryFailures makes outside it: a first attempt that failed after 250 ms,
// with 300 ms allowed and a first wait of 100 ms, is not retried.
func TestRetryFailuresCountsTheFirstAttempt(t *testing.T) {
	var attempts int
	h := retryFailures(middleware.Retry{MaxRetries: 4, InitialInterval: 100 * time.Millisecond, Multiplier: 1, MaxElapsedTime: 300 * time.Millisecond})(
		func(*message.Message) ([]*message.Message, error) {
			attempts++
			if attempts == 1 {
				time.Sleep(250 * time.Millisecond)
			}
			return nil, errors.New("slow and failing")
		})
	msg := message.NewMessage("m", []byte("{}"))
	msg.SetContext(t.Context())
	if _, err := h(msg); err == nil || attempts != 1 {
		t.Fatalf("%d attempts, %v; want 1 and its error (250 + 100 ms past the 300 allowed)", attempts, err)
	}
}
