package router

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

// TestRelayWaitsForOlderTransactions: a row committed while an older transaction that
// writes the outbox is still open is not forwarded before that transaction's row, so a
// user's commands reach Kafka in commit order and none is skipped.
func TestRelayWaitsForOlderTransactions(t *testing.T) {
	ctx, pool, schema, broker, topics := newRelayEnv(t, "relay-test")
	outbox := storage.NewOutboxMaintenance(pool, schema)
	r, err := NewRelay(outbox, RelayConfig{Shards: 1, Brokers: broker.Addrs(), Topic: topics.Scores}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer r.producer.Close()
	table := schema.Messages.MessagesTable(schema.Topic(0))
	insert := `INSERT INTO ` + table + ` (uuid, payload, metadata, transaction_id) VALUES ($1, '{}', '{"partition_key": "u1"}', pg_current_xact_id())`

	older, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer older.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit a no-op; on a failure it frees the connection pool.Close waits for
	if _, err := older.Exec(ctx, insert, "first"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, insert, "second"); err != nil { // commits while the older one is open
		t.Fatal(err)
	}
	claim, err := outbox.Claim(ctx, 0)
	if err != nil || claim == nil {
		t.Fatalf("claim: %v, %v", claim, err)
	}
	defer claim.Close()
	if other, err := outbox.Claim(ctx, 0); err != nil || other != nil {
		t.Fatalf("a second claim of the shard: %v, %v; want none: one relay forwards a shard", other, err)
	}
	n, pending, err := r.forward(ctx, claim)
	if err != nil || n != 0 || !pending {
		t.Fatalf("with an older transaction open: forwarded %d, pending %v, %v; want nothing forwarded, pending", n, pending, err)
	}
	if err := older.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Both once no transaction older than them is open anywhere on the server (the
	// snapshot's xmin is cluster-wide, so another test's transaction begun between the two
	// may hold the second back briefly: then the first goes alone, in order).
	for total := 0; total < 2; {
		if n, pending, err = r.forward(ctx, claim); err != nil || total+n > 2 || (total+n < 2 && !pending) {
			t.Fatalf("after it committed: forwarded %d after %d, pending %v, %v; want both", n, total, pending, err)
		}
		if total += n; total < 2 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if n, _, err = r.forward(ctx, claim); err != nil || n != 0 {
		t.Fatalf("again: forwarded %d, %v; want nothing: the position moved", n, err)
	}

	if got := kafkaUntil(ctx, t, broker, topics.Scores, "second"); strings.Join(got, " ") != "first second" {
		t.Fatalf("Kafka order %v, want [first second]", got)
	}
}

// kafkaUntil reads partition 0 of topic from its start until a message with uuid last
// (each keyed u1), and returns the uuids read in order.
func kafkaUntil(ctx context.Context, t *testing.T, broker *EmbeddedKafka, topic, last string) []string {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = KafkaVersion
	consumer, err := sarama.NewConsumer(broker.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var got []string
	for {
		select {
		case m := <-pc.Messages():
			if string(m.Key) != "u1" {
				t.Errorf("key %q, want the partition key u1", m.Key)
			}
			for _, h := range m.Headers {
				if string(h.Key) == "_watermill_message_uuid" {
					got = append(got, string(h.Value))
					if string(h.Value) == last {
						return got
					}
				}
			}
		case <-ctx.Done():
			t.Fatalf("Kafka has %v, and not %s", got, last)
		}
	}
}

// TestRelayRewindsAShardItClaims: a relay that starts while another forwards a shard
// leaves the shard's position alone, and rewinds it when it takes the shard over. Relay
// A acknowledges rows a broker then lost; had B rewound at its start, A's next ack would
// have moved the position past them again and no relay would ever forward them.
func TestRelayRewindsAShardItClaims(t *testing.T) {
	ctx, pool, schema, broker, topics := newRelayEnv(t, "relay-rewind")
	outbox := storage.NewOutboxMaintenance(pool, schema)
	insert := outboxInserter(ctx, t, pool, schema)
	position := func() string { t.Helper(); return relayPosition(ctx, t, pool, schema) }
	// A forwards what it reads to a broker that acknowledges and loses it.
	a, err := outbox.Claim(ctx, 0)
	if err != nil || a == nil {
		t.Fatalf("claim: %v, %v", a, err)
	}
	aHeld := true
	defer func() {
		if aHeld {
			a.Close()
		}
	}()
	forwardLost := func(id string) {
		t.Helper()
		insert(id)
		for ctx.Err() == nil { // read once no older transaction is open on the server
			msgs, _, err := a.Read(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) > 0 {
				if len(msgs) != 1 || msgs[0].UUID != id {
					t.Fatalf("A read %d messages, want %s", len(msgs), id)
				}
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := a.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	forwardLost("lost")
	acked := position()

	b, err := NewRelay(outbox, RelayConfig{Shards: 1, Brokers: broker.Addrs(), Topic: topics.Scores}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	runRelay(ctx, t, b)
	time.Sleep(200 * time.Millisecond)
	if now := position(); now != acked {
		t.Fatalf("relay B moved the position of a shard relay A forwards: %s, then %s", acked, now)
	}
	forwardLost("lost-too") // A acks after B started
	a.Close()               // and stops: B takes the shard over
	aHeld = false
	if got := kafkaUntil(ctx, t, broker, topics.Scores, "lost-too"); strings.Join(got, " ") != "lost lost-too" {
		t.Fatalf("Kafka has %v, want [lost lost-too]: B rewinds the shard it takes over", got)
	}
}

// TestRelayLingers drives a shard's waits with a test clock: the first read is not
// delayed; while rows keep coming, a read waits until the spacing after the last one that
// forwarded rows (the wait counts the time already passed): the whole Linger when, at the
// rate the last read's rows came, a Linger gathers half a batch, proportionally less
// below; a read that found nothing lets the next one go at once.
func TestRelayLingers(t *testing.T) {
	ctx, pool, schema, broker, topics := newRelayEnv(t, "relay-linger")
	reg := prometheus.NewRegistry()
	// Batches of 2: a read of one row gathers half a batch.
	const poll, idle, linger = 10 * time.Millisecond, time.Minute, 4 * time.Second
	r, err := NewRelay(storage.NewOutboxMaintenance(pool, schema), RelayConfig{
		Shards: 1, Brokers: broker.Addrs(), Topic: topics.Scores, Batch: 2,
		IdleInterval: idle, PollInterval: poll, Linger: linger,
	}, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer r.producer.Close()
	clk := newTestClock()
	r.clock = clk
	insert := outboxInserter(ctx, t, pool, schema)
	batches := func() (n uint64, rows float64) {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "leaderboard_relay_batch_size" {
				h := f.GetMetric()[0].GetHistogram()
				return h.GetSampleCount(), h.GetSampleSum()
			}
		}
		return 0, 0
	}
	// nextWait returns the next wait the shard's loop starts. Polls for rows behind an
	// open transaction (any in the cluster holds them back) are woken at once, without
	// moving the clock: they are not what this test is about.
	nextWait := func() time.Duration {
		t.Helper()
		for {
			select {
			case d := <-clk.waits:
				if d != poll {
					return d
				}
				r.signal(0)
			case <-time.After(30 * time.Second):
				n, _ := batches()
				t.Fatalf("the relay started no wait within 30 s (%d batches forwarded)", n)
			}
		}
	}
	expect := func(wait time.Duration, wantBatches uint64, wantRows float64) {
		t.Helper()
		if d := nextWait(); d != wait {
			t.Fatalf("the relay waits %s, want %s", d, wait)
		}
		if n, rows := batches(); n != wantBatches || rows != wantRows {
			t.Fatalf("%d batches of %v rows in all, want %d of %v", n, rows, wantBatches, wantRows)
		}
	}

	insert("a")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.holdShard(runCtx, 0) }()
	defer func() { stop(); <-done }()
	expect(idle, 1, 1) // the first read went at once (no rate known yet), then the shard sleeps

	clk.Advance(time.Second)
	insert("b")
	r.signal(0)
	expect(idle, 2, 2) // b went at once: a's read set no wait; b came 1 s after it, a rate that fills a Linger 4 times
	insert("c")
	r.signal(0)
	expect(linger, 2, 2) // c waits out the whole Linger (rows committed meanwhile would join it)
	clk.Advance(linger)
	expect(idle, 3, 3) // one row in 4 s: still half a batch per Linger

	// d is held back a while by an open transaction (another test's would do the same):
	// the read that finds it pending must not restart the time d's rate is counted over.
	clk.Advance(16*time.Second - poll)
	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	insert("d")
	r.signal(0)
	select {
	case d := <-clk.waits:
		if d != poll {
			t.Fatalf("with d held back the relay waits %s, want a poll (%s)", d, poll)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay started no wait within 30 s")
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(poll)
	expect(idle, 4, 4) // c's wait is long over: d went once it was no longer held back
	insert("e")
	r.signal(0)
	expect(time.Second, 4, 4) // d was one row in 16 s since c's read: a quarter of the Linger
	clk.Advance(time.Second)
	expect(idle, 5, 5)

	r.signal(0) // nothing new: the read still waits its spacing (e: one row in 1 s), then finds nothing
	expect(linger, 5, 5)
	clk.Advance(linger)
	expect(idle, 5, 5)
	insert("f")
	r.signal(0)
	expect(idle, 6, 6) // f went at once after the empty read
}

// testClock is a clock that moves only when a test advances it; every wait it starts is
// sent on waits.
type testClock struct {
	waits chan time.Duration
	mu    sync.Mutex
	now   time.Time
	timer []testTimer
}

type testTimer struct {
	at time.Time
	ch chan time.Time
}

func newTestClock() *testClock {
	return &testClock{waits: make(chan time.Duration, 100), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.timer = append(c.timer, testTimer{c.now.Add(d), ch})
	c.waits <- d
	return ch
}

// Advance moves the clock on and fires the waits that are due.
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timer[:0]
	for _, tm := range c.timer {
		if tm.at.After(c.now) {
			kept = append(kept, tm)
			continue
		}
		tm.ch <- c.now
	}
	c.timer = kept
}

// newRelayEnv gives a relay test a migrated database of one outbox shard, an embedded
// broker and its topics (one score partition), all closed when the test ends.
func newRelayEnv(t *testing.T, topicPrefix string) (context.Context, *pgxpool.Pool, storage.OutboxSchema, *EmbeddedKafka, Topics) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, storagetest.FromEnv(os.Getenv).NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := storage.NewOutboxSchema()
	if err := storage.Migrate(ctx, pool, schema, 1); err != nil {
		t.Fatal(err)
	}
	broker, err := StartEmbeddedKafka("", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	topics := NewTopics(topicPrefix, 1)
	if err := EnsureTopics(context.Background(), broker.Addrs(), topics); err != nil {
		t.Fatal(err)
	}
	return ctx, pool, schema, broker, topics
}

// outboxInserter returns a function that commits an outbox row of shard 0 keyed u1 with
// uuid id.
func outboxInserter(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema storage.OutboxSchema) func(id string) {
	table := schema.Messages.MessagesTable(schema.Topic(0))
	return func(id string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (uuid, payload, metadata, transaction_id) VALUES ($1, '{}', '{"partition_key": "u1"}', pg_current_xact_id())`, id); err != nil {
			t.Fatal(err)
		}
	}
}

// relayPosition is the relay's acknowledged position in shard 0 ("txid:offset", or "none").
func relayPosition(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema storage.OutboxSchema) (pos string) {
	t.Helper()
	if err := pool.QueryRow(ctx, `SELECT coalesce((SELECT last_processed_transaction_id::text || ':' || offset_acked FROM `+
		schema.Offsets.MessagesOffsetsTable(schema.Topic(0))+` WHERE consumer_group = $1), 'none')`, storage.RelayConsumerGroup).Scan(&pos); err != nil {
		t.Fatal(err)
	}
	return pos
}

// runRelay runs r until the test ends and waits until it runs.
func runRelay(ctx context.Context, t *testing.T, r *Relay) {
	t.Helper()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-r.Running()
}

// TestRelayForwardsTheRowName: a plain outbox message goes to Kafka with the name of its
// outbox row (the projector deletes that row when it applies it); a requeued dead letter,
// a forwarder envelope, goes without one, whatever the metadata it kept names: its own
// row's uuid is the envelope's, and the row it first came from is gone.
func TestRelayForwardsTheRowName(t *testing.T) {
	r := &Relay{cfg: RelayConfig{Topic: "scores"}}
	header := func(pm *sarama.ProducerMessage, key string) (string, bool) {
		for _, h := range pm.Headers {
			if string(h.Key) == key {
				return string(h.Value), true
			}
		}
		return "", false
	}

	plain := message.NewMessage("ev-1", []byte(`{"event_id":"ev-1"}`))
	plain.Metadata.Set(messages.MetaOutboxRow, "0:700:12")
	pm, err := r.producerMessage(plain)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := header(pm, messages.MetaOutboxRow); !ok || got != "0:700:12" || pm.Topic != "scores" {
		t.Errorf("plain message: topic %s, row %q (%v); want scores, 0:700:12", pm.Topic, got, ok)
	}

	env, err := json.Marshal(envelope{DestinationTopic: "requeued", UUID: "ev-2", Payload: []byte(`{"event_id":"ev-2"}`),
		Metadata: map[string]string{messages.MetaOutboxRow: "1:500:3", messages.MetaPartitionKey: "u-2"}})
	if err != nil {
		t.Fatal(err)
	}
	wrapped := message.NewMessage("envelope-uuid", env)
	wrapped.Metadata.Set(messages.MetaOutboxRow, "1:900:4")
	pm, err = r.producerMessage(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := header(pm, messages.MetaOutboxRow); ok || pm.Topic != "requeued" {
		t.Errorf("requeued dead letter: topic %s, row %q; want requeued and no row", pm.Topic, got)
	}
	if got, _ := header(pm, messages.MetaPartitionKey); got != "u-2" {
		t.Errorf("requeued dead letter lost its metadata: partition key %q", got)
	}
}

// TestRelayClaimingItsShardAgainForwardsNothingAgain: a relay whose PostgreSQL session breaks
// (a network blip, a call past relayCallTimeout under load) claims its shard again on a
// new session; nothing moved its position meanwhile, and Kafka acknowledged everything
// before it: it does not rewind. Rewinding on every claim produced every forwarded command
// the projector had not applied yet (here: no projector) again, at every reconnect: a lag
// of a million commands became two million. Found by a review.
func TestRelayClaimingItsShardAgainForwardsNothingAgain(t *testing.T) {
	ctx, pool, schema, broker, topics := newRelayEnv(t, "relay-reclaim")
	outbox := storage.NewOutboxMaintenance(pool, schema)
	insert := outboxInserter(ctx, t, pool, schema)
	r, err := NewRelay(outbox, RelayConfig{Shards: 1, Brokers: broker.Addrs(), Topic: topics.Scores, IdleInterval: 50 * time.Millisecond}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	runRelay(ctx, t, r)
	for _, id := range []string{"a", "b", "c"} {
		insert(id)
	}
	if got := kafkaUntil(ctx, t, broker, topics.Scores, "c"); strings.Join(got, " ") != "a b c" {
		t.Fatalf("Kafka has %v, want [a b c]", got)
	}
	// The relay acknowledges c in PostgreSQL once Kafka has it: wait for that ack, or the
	// claim below would rightly start before c and forward it again.
	var cRow string
	if err := pool.QueryRow(ctx, `SELECT transaction_id::text || ':' || "offset" FROM `+schema.Messages.MessagesTable(schema.Topic(0))+` WHERE uuid = 'c'`).Scan(&cRow); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		pos := relayPosition(ctx, t, pool, schema)
		if pos == cRow {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay's position is %s 30 s after Kafka had c, want c's row %s", pos, cRow)
		}
	}
	// The session holding the shard's lock goes (as PostgreSQL ends a session the network
	// cut off); the relay claims the shard again on a new one.
	var ended int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) t`).Scan(&ended); err != nil || ended != 1 {
		t.Fatalf("ended %d sessions holding the shard, %v; want the relay's", ended, err)
	}
	insert("d")
	if got := kafkaUntil(ctx, t, broker, topics.Scores, "d"); strings.Join(got, " ") != "a b c d" {
		t.Errorf("Kafka has %v, want [a b c d]: a relay claiming again the shard it forwarded produced every command the projector had not applied yet a second time", got)
	}
}

// failures is a slog handler that signals every "relay shard failed" record.
type failures struct{ ch chan struct{} }

func (f failures) Enabled(context.Context, slog.Level) bool { return true }
func (f failures) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "relay shard failed") {
		select {
		case f.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (f failures) WithAttrs([]slog.Attr) slog.Handler { return f }
func (f failures) WithGroup(string) slog.Handler      { return f }

// TestRelayRewindsAfterAFailedProduce: the broker acknowledges a, b, c and then loses
// them (it restarts without its data, README: "a broker that lost messages (even its whole
// data directory) gets them again"). The relay's next produce fails, it drops its claim and
// claims the shard again at the position it acked itself: it rewinds all the same, so a,
// b, c (never applied) reach the new broker. Without that (the skip for a claim at its own
// position) they were never forwarded again. Found by a review.
func TestRelayRewindsAfterAFailedProduce(t *testing.T) {
	ctx, pool, schema, broker, topics := newRelayEnv(t, "relay-review5-lost")
	outbox := storage.NewOutboxMaintenance(pool, schema)
	insert := outboxInserter(ctx, t, pool, schema)
	_, portText, err := net.SplitHostPort(broker.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portText)
	failed := failures{ch: make(chan struct{}, 1)}
	r, err := NewRelay(outbox, RelayConfig{Shards: 1, Brokers: broker.Addrs(), Topic: topics.Scores, IdleInterval: 50 * time.Millisecond}, nil, slog.New(failed))
	if err != nil {
		t.Fatal(err)
	}
	runRelay(ctx, t, r)
	for _, id := range []string{"a", "b", "c"} {
		insert(id)
	}
	if got := kafkaUntil(ctx, t, broker, topics.Scores, "c"); strings.Join(got, " ") != "a b c" {
		t.Fatalf("Kafka has %v, want [a b c]", got)
	}
	// The broker goes, with everything it had; the relay's next produce fails.
	broker.Close()
	insert("d")
	select {
	case <-failed.ch:
	case <-ctx.Done():
		t.Fatal("the relay's produce to a broker that is gone did not fail")
	}
	// The broker comes back empty on the same address.
	fresh, err := StartEmbeddedKafka("", port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Close)
	if err := EnsureTopics(context.Background(), fresh.Addrs(), topics); err != nil {
		t.Fatal(err)
	}
	if got := kafkaUntil(ctx, t, fresh, topics.Scores, "d"); strings.Join(got, " ") != "a b c d" {
		t.Errorf("the broker that lost its data has %v, want [a b c d]: after a failed produce a claim rewinds", got)
	}
}

// TestRelayKeepsAUsersOrderThroughAPartialFailure: a send in which one of a user's
// messages fails and the user's later ones go through (sarama's producer does so when a
// partition's leader is lost for one message and found for the next) must not leave the
// failed one behind them once the batch is sent again: after a broker's restart under
// load, an admin's adjustment (b) was applied before the score it corrected (a) and undone
// by it. Found by an outage test: 2 of 400 adjustments undone.
func TestRelayKeepsAUsersOrderThroughAPartialFailure(t *testing.T) {
	ctx, pool, schema, broker, topics := newRelayEnv(t, "relay-partial")
	outbox := storage.NewOutboxMaintenance(pool, schema)
	insert := outboxInserter(ctx, t, pool, schema)
	for _, id := range []string{"a", "b", "c"} { // one batch: the relay is not running yet
		insert(id)
	}
	r, err := NewRelay(outbox, RelayConfig{Shards: 1, Brokers: broker.Addrs(), Topic: topics.Scores, IdleInterval: 50 * time.Millisecond}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	partial := &partialProducer{SyncProducer: r.producer, failID: "a"}
	r.producer = partial
	runRelay(ctx, t, r)
	got := kafkaUntil(ctx, t, broker, topics.Scores, "c")
	for !slices.Contains(got, "a") {
		got = kafkaUntil(ctx, t, broker, topics.Scores, "a")
	}
	var first []string // each message where Kafka has it first: what the projector applies
	for _, id := range got {
		if !slices.Contains(first, id) {
			first = append(first, id)
		}
	}
	if !partial.failed.Load() {
		t.Fatal("the send of a never failed")
	}
	if strings.Join(first, " ") != "a b c" {
		t.Errorf("Kafka has %v: the user's commands first in the order %v, want a b c", got, first)
	}
}

// partialProducer fails the message failID the first time it is sent and delivers the
// others of that send, as sarama's producer may (TestRelayKeepsAUsersOrderThroughAPartialFailure).
type partialProducer struct {
	sarama.SyncProducer
	failID string
	failed atomic.Bool
}

func (p *partialProducer) SendMessages(msgs []*sarama.ProducerMessage) error {
	var errs sarama.ProducerErrors
	pass := make([]*sarama.ProducerMessage, 0, len(msgs))
	for _, m := range msgs {
		if string(m.Headers[0].Value) == p.failID && !p.failed.Swap(true) {
			errs = append(errs, &sarama.ProducerError{Msg: m, Err: sarama.ErrNotLeaderForPartition})
			continue
		}
		pass = append(pass, m)
	}
	if err := p.SyncProducer.SendMessages(pass); err != nil {
		return err
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// TestRounds: a batch goes in sends holding at most one message of each topic and key,
// each key's messages in its order; a batch of different keys is one send.
func TestRounds(t *testing.T) {
	pm := func(topic, key, id string) *sarama.ProducerMessage {
		return &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(key), Value: sarama.StringEncoder(id)}
	}
	show := func(rs [][]*sarama.ProducerMessage) string {
		var out []string
		for _, r := range rs {
			var ids []string
			for _, m := range r {
				b, _ := m.Value.Encode()
				ids = append(ids, string(b))
			}
			out = append(out, strings.Join(ids, ","))
		}
		return strings.Join(out, " | ")
	}
	for _, c := range []struct {
		in   []*sarama.ProducerMessage
		want string
	}{
		{[]*sarama.ProducerMessage{pm("s", "u1", "a")}, "a"},
		{[]*sarama.ProducerMessage{pm("s", "u1", "a"), pm("s", "u2", "b"), pm("s", "", "c"), pm("r", "u1", "d")}, "a,b,c,d"},
		{[]*sarama.ProducerMessage{pm("s", "u1", "a"), pm("s", "u2", "b"), pm("s", "u1", "c"), pm("s", "u1", "d"), pm("s", "u2", "e"), pm("s", "u3", "f")}, "a,b,f | c,e | d"},
		{[]*sarama.ProducerMessage{pm("s", "", "a"), pm("s", "", "b")}, "a | b"},
	} {
		if got := show(rounds(c.in)); got != c.want {
			t.Errorf("rounds: %s, want %s", got, c.want)
		}
	}
}
