package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/openleaderboard/leaderboard/messages"
)

// OutboxClaim is a relay's hold on one outbox shard (storage.OutboxMaintenance.Claim):
// Read returns the messages after the shard's position (pending: more wait behind a
// write transaction still open), Ack moves the position past them, Close releases the
// shard. An alias of an interface literal, identical to storage's.
type OutboxClaim = interface {
	Read(ctx context.Context, limit int) (msgs []*message.Message, pending bool, err error)
	Ack(ctx context.Context) error
	Position() string
	Acked() string
	Rewind(ctx context.Context) (int64, error)
	Close()
}

// Outbox is what the relay needs of the SQL outbox (storage.OutboxMaintenance).
type Outbox interface {
	// Claim takes a shard for this relay; nil without error when another relay has it.
	Claim(ctx context.Context, shard int) (OutboxClaim, error)
	// Listen calls wake with the shard of every outbox commit until ctx ends or it fails.
	Listen(ctx context.Context, wake func(shard int)) error
	// Backlog counts a shard's rows not forwarded yet.
	Backlog(ctx context.Context, shard int) (int64, error)
	// Prune deletes up to limit rows of a shard that are forwarded and applied.
	Prune(ctx context.Context, shard, limit int) (int64, error)
}

// RelayConfig configures the relay.
type RelayConfig struct {
	Shards  int
	Brokers []string
	// Topic is where the outbox's plain messages go (forwarder envelopes name their own).
	Topic string
	// PollInterval is how soon a relay looks again when rows are pending behind a write
	// transaction still open; IdleInterval how long it sleeps without a notification.
	PollInterval time.Duration
	IdleInterval time.Duration
	// PruneInterval is how often applied outbox rows are deleted.
	PruneInterval time.Duration
	// Batch bounds the rows read and produced at once (default 500).
	Batch int
	// Throttle caps the messages forwarded per second across shards (0: no cap), so a
	// catch-up after an outage does not starve live traffic downstream.
	Throttle float64
	// Linger is the longest time between two reads of a shard while rows keep coming and
	// no batch fills (0: none): the rows of several outbox commits then travel in one read,
	// produce request and acknowledgement. The wait follows the load (spacing): the whole
	// Linger once, at the rate the last read's rows came, it gathers half a batch or more,
	// proportionally less below, so a quiet shard forwards a row at once and a busy one in
	// large batches. A read after one that found nothing to forward (a quiet spell, or rows
	// behind an open transaction) is not delayed.
	Linger time.Duration
}

// Relay forwards the SQL outbox to Kafka in batches: per shard, it reads up to Batch rows
// after its position (rows of write transactions still open are left for later, as
// watermill-sql does), produces them in one request, then moves its position (in the
// shard's watermill-sql offsets table). At least once: a crash between produce and ack
// forwards the batch again, and a relay that claims a shard rewinds it to the oldest
// unapplied command first.
// Ordering per user holds: a user's commands are in one shard, read in commit order, and
// produced by an idempotent producer with one request in flight. One relay process works
// a shard at a time (a session advisory lock); others stand by. An outbox commit's
// NOTIFY wakes it, so it is quiet when idle.
type Relay struct {
	outbox   Outbox
	producer sarama.SyncProducer
	cfg      RelayConfig
	logger   *slog.Logger
	wake     []chan struct{}
	// acked is, per shard, the position this process last moved it to (only the shard's
	// own loop touches its element): a claim that finds it there need not rewind.
	acked   []string
	running chan struct{}
	pace    *pacer
	clock   clock // a shard's waits between reads (tests drive it)
	// sending counts the sends under way, those given up on included: sarama's producer
	// must not be closed under one (its Close closes the channel the send is still
	// feeding, and the send panics).
	sending sync.WaitGroup

	batches  prometheus.Histogram
	produced prometheus.Counter
	duration prometheus.Histogram
}

// NewRelay connects the producer; Run starts forwarding.
func NewRelay(outbox Outbox, cfg RelayConfig, reg prometheus.Registerer, logger *slog.Logger) (*Relay, error) {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.IdleInterval <= 0 {
		cfg.IdleInterval = time.Second
	}
	if cfg.PruneInterval <= 0 {
		cfg.PruneInterval = 5 * time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	producer, err := NewSyncProducer(cfg.Brokers)
	if err != nil {
		return nil, err
	}
	r := &Relay{outbox: outbox, producer: producer, cfg: cfg, logger: logger.With("role", "relay"),
		running: make(chan struct{}), pace: newPacer(cfg.Throttle), clock: realClock{},
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leaderboard_relay_batch_size",
			Help: "Outbox rows forwarded to Kafka per batch (one produce request, more when a user has several commands in it).", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		produced: prometheus.NewCounter(prometheus.CounterOpts{Name: "leaderboard_relay_messages_total",
			Help: "Outbox rows forwarded to Kafka (a batch forwarded again after a crash counts again)."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leaderboard_relay_batch_seconds",
			Help: "Time to read, produce and acknowledge one batch.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
	}
	for range cfg.Shards {
		r.wake = append(r.wake, make(chan struct{}, 1))
	}
	r.acked = make([]string, cfg.Shards)
	if reg != nil {
		reg.MustRegister(r.batches, r.produced, r.duration)
		for shard := range cfg.Shards {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "leaderboard_outbox_backlog", Help: "Outbox rows of a shard the relay has not forwarded yet.",
				ConstLabels: prometheus.Labels{"shard": strconv.Itoa(shard)},
			}, NewScrapeCount(time.Second, 10*time.Second, func(ctx context.Context) (int64, error) {
				return outbox.Backlog(ctx, shard)
			}).Get))
		}
	}
	return r, nil
}

// NewSyncProducer returns an idempotent producer waiting for every in-sync replica, with
// one request in flight per broker (so batches keep their order), partitioning by key as
// watermill-kafka's publisher does.
func NewSyncProducer(brokers []string) (sarama.SyncProducer, error) {
	cfg := sarama.NewConfig()
	cfg.Version = KafkaVersion
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Producer.Return.Successes = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Retry.Max = 10
	cfg.Producer.Retry.Backoff = 100 * time.Millisecond
	cfg.Producer.Flush.MaxMessages = 0 // SendMessages sends what it is given at once
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	return p, nil
}

// Run forwards and prunes until ctx ends; each shard it claims, it first rewinds past
// what was acknowledged but never applied (holdShard).
func (r *Relay) Run(ctx context.Context) error {
	defer func() {
		// Close the producer once the sends given up on have returned; one that does not
		// return in time keeps the producer open for the process's exit to end.
		err := CloseWithin(closeTimeout, "relay producer's sends", func() error { r.sending.Wait(); return nil })
		if err == nil {
			err = CloseWithin(closeTimeout, "relay producer", r.producer.Close)
		}
		if err != nil {
			r.logger.Warn("relay stopping", "err", err)
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { r.listen(gctx); return nil })
	for shard := range r.cfg.Shards {
		g.Go(func() error { r.shardLoop(gctx, shard); return nil })
	}
	g.Go(func() error { r.pruneLoop(gctx); return nil })
	close(r.running)
	return g.Wait()
}

// Running is closed once the relay runs.
func (r *Relay) Running() <-chan struct{} { return r.running }

// listen wakes shards on their outbox notifications, reconnecting when its connection
// breaks (shards poll at IdleInterval meanwhile).
func (r *Relay) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		r.logger.Warn("outbox listener lost its connection", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context) error {
	return r.outbox.Listen(ctx, func(shard int) {
		if shard >= 0 && shard < len(r.wake) {
			r.signal(shard)
		}
	})
}

func (r *Relay) signal(shard int) {
	select {
	case r.wake[shard] <- struct{}{}:
	default:
	}
}

// shardLoop forwards one shard while this process holds its lock.
func (r *Relay) shardLoop(ctx context.Context, shard int) {
	for ctx.Err() == nil {
		err := r.holdShard(ctx, shard)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.logger.Warn("relay shard failed; retrying", "shard", shard, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// holdShard claims the shard and forwards batches while it holds it, until ctx ends or
// the claim's connection fails (which releases it).
func (r *Relay) holdShard(ctx context.Context, shard int) error {
	cctx, cancel := context.WithTimeout(ctx, relayCallTimeout)
	claim, err := r.outbox.Claim(cctx, shard)
	cancel()
	if err != nil || claim == nil {
		return err // nil, nil: another relay forwards this shard; try again later
	}
	defer claim.Close()
	// The rewind runs under the claim: while another relay forwards the shard, moving its
	// position back would race that relay's acks, and an ack landing after it would undo
	// it (a command the broker lost would then wait for the next rewind). A claim rewinds,
	// so a relay taking over from one that died recovers what it lost too; but not one
	// that finds the position this process left (its PostgreSQL session broke, say, and
	// nobody forwarded the shard meanwhile): with the projector behind, it would produce
	// everything not applied yet again, at every reconnect. After a failed produce it does
	// rewind (acked is cleared): the broker may be back without its data.
	if pos := claim.Position(); pos == "" || pos != r.acked[shard] {
		rctx, cancel := context.WithTimeout(ctx, rewindTimeout)
		n, err := claim.Rewind(rctx)
		cancel()
		if err != nil {
			return err
		}
		if n > 0 {
			r.logger.Info("relay rewound outbox to the oldest unapplied command", "shard", shard, "rows", n)
		}
		r.acked[shard] = ""
	}
	r.logger.Info("relay forwards shard", "shard", shard)
	var (
		prev  time.Time     // the start of the last read that forwarded rows or found none held back
		last  time.Time     // the start of the last read that forwarded rows without filling a batch
		space time.Duration // the least time from last to the next read
	)
	for {
		if wait := space - r.clock.Now().Sub(last); !last.IsZero() && wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-r.clock.After(wait):
			}
		}
		start, began := r.clock.Now(), time.Now()
		n, pending, err := r.forward(ctx, claim)
		if err != nil {
			if errors.Is(err, errProduce) {
				// The broker may have lost what it acknowledged (it failed, and may come
				// back without its data): the next claim rewinds.
				r.acked[shard] = ""
			}
			return err
		}
		if n > 0 {
			r.acked[shard] = claim.Acked()
		}
		elapsed := time.Duration(0) // the rows read came in this time (the first read's: unknown)
		if !prev.IsZero() {
			elapsed = start.Sub(prev)
		}
		if n > 0 || !pending { // rows held back by an open transaction keep counting from the read before
			prev = start
		}
		switch {
		case n == r.cfg.Batch:
			r.duration.Observe(time.Since(began).Seconds())
			continue // more where these came from
		case n > 0:
			r.duration.Observe(time.Since(began).Seconds())
			last, space = start, r.spacing(n, elapsed)
		default: // nothing to forward: the next rows are not held back
			last = time.Time{}
		}
		wait := r.cfg.IdleInterval
		if pending { // rows behind a transaction still open: look again soon
			wait = r.cfg.PollInterval
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake[shard]:
		case <-r.clock.After(wait):
		}
	}
}

// spacing is how long after the start of a read of n rows, which came in elapsed, the
// next read of the shard waits: Linger when, at that rate, a Linger gathers half a batch
// or more, proportionally less below. At 4 shards, batches of 500 and a Linger of 200 ms,
// the whole Linger from 5,000 rows a second, 80 ms at 2,000, 8 at 200.
func (r *Relay) spacing(n int, elapsed time.Duration) time.Duration {
	if r.cfg.Linger <= 0 || elapsed <= 0 {
		return 0
	}
	fill := float64(n) * r.cfg.Linger.Seconds() / (elapsed.Seconds() * float64(r.cfg.Batch) / 2)
	if fill >= 1 {
		return r.cfg.Linger
	}
	return time.Duration(fill * float64(r.cfg.Linger))
}

// clock is what a shard's loop waits on: the wall clock, or a test's.
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// relayCallTimeout bounds each of the relay's PostgreSQL calls: a connection the network
// cut off answers nothing and, without a deadline, held its shard until the system's TCP
// timeout (about 15 minutes); past it the call fails and the relay drops the session
// (which releases the shard's lock) and claims the shard again on a new one.
const relayCallTimeout = 15 * time.Second

// errProduce marks a batch the broker did not take.
var errProduce = errors.New("produce")

// rewindTimeout bounds the rewind of a shard just claimed, which looks for the oldest
// unapplied command among the rows the relay passed and counts those after it: longer
// than a call of the forwarding loop when the projector lags far behind.
const rewindTimeout = time.Minute

// forward reads a batch after the shard's position, produces it in one request and
// moves the position past it. pending says more rows wait behind an open transaction.
func (r *Relay) forward(ctx context.Context, claim OutboxClaim) (n int, pending bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, relayCallTimeout)
	batch, pending, err := claim.Read(rctx, r.cfg.Batch)
	cancel()
	if err != nil || len(batch) == 0 {
		return 0, pending, err
	}
	out := make([]*sarama.ProducerMessage, 0, len(batch))
	for _, msg := range batch {
		pm, err := r.producerMessage(msg)
		if err != nil {
			return 0, false, err
		}
		out = append(out, pm)
	}
	r.pace.wait(ctx, len(out))
	for _, round := range rounds(out) {
		if err := r.send(ctx, round); err != nil {
			return 0, false, fmt.Errorf("%w: %d messages: %w", errProduce, len(round), err)
		}
	}
	actx, cancel := context.WithTimeout(ctx, relayCallTimeout)
	err = claim.Ack(actx)
	cancel()
	if err != nil {
		return 0, false, err
	}
	r.batches.Observe(float64(len(batch)))
	r.produced.Add(float64(len(batch)))
	return len(batch), pending, nil
}

// rounds splits a batch into sends that hold at most one message of each topic and key (a
// user): round i holds every key's i-th message, in the batch's order. sarama's producer
// does not keep a partition's order when one message of a send fails and a later one goes
// through (partitionProducer.dispatch returns a message whose partition leader it could
// not find and goes on with the next; a message past its retries is returned while those
// behind it are sent), and the batch sent again then put the failed command behind the
// user's later ones: after a broker's restart under load, an admin's adjustment or
// removal was applied before the score it corrected, and undone by it. A send that fails
// ends the batch (forward), so each user's messages in Kafka stay a prefix of the user's
// commands, which the batch sent again continues in order (the projector skips the
// duplicates). A batch whose users are all different is one send; under load a batch
// often holds a user twice (the benchmark's 20,000 users: two or three sends for a batch
// of 250 to 500), each send one more round trip to the broker.
func rounds(out []*sarama.ProducerMessage) [][]*sarama.ProducerMessage {
	if len(out) < 2 {
		return [][]*sarama.ProducerMessage{out}
	}
	type topicKey struct{ topic, key string }
	seen := make(map[topicKey]int, len(out))
	var rs [][]*sarama.ProducerMessage
	for _, pm := range out {
		k := topicKey{topic: pm.Topic}
		if pm.Key != nil {
			b, _ := pm.Key.Encode() // a ByteEncoder's bytes (wireMarshaler)
			k.key = string(b)
		}
		i := seen[k]
		seen[k] = i + 1
		if i == len(rs) {
			n := 4 // later rounds: the few users with several commands in the batch
			if i == 0 {
				n = len(out)
			}
			rs = append(rs, make([]*sarama.ProducerMessage, 0, n))
		}
		rs[i] = append(rs[i], pm)
	}
	return rs
}

// send produces out, or gives up once ctx ends: sarama's SendMessages takes no context,
// and against a broker that stopped answering each of its attempts waits out a read
// timeout, which kept a stopping process for minutes. The rows of a send given up stay
// unacknowledged and are forwarded again (at least once; the projector applies each
// event once).
func (r *Relay) send(ctx context.Context, out []*sarama.ProducerMessage) error {
	r.sending.Add(1)
	return Await(ctx, func() error {
		defer r.sending.Done()
		return r.producer.SendMessages(out)
	})
}

// Await runs f and returns its error, or ctx's once ctx ends first, leaving f running: for
// the calls of Kafka clients that take no context (sarama's), which against a broker that
// stopped answering wait out read timeouts, retried.
func Await(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AwaitStop runs f, which returns once ctx ends, and waits for it at most d after that;
// false when it was left running.
func AwaitStop(ctx context.Context, d time.Duration, f func()) bool {
	grace, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(d, cancel) })
	defer stop()
	return Await(grace, func() error { f(); return nil }) == nil
}

// CloseWithin runs close and waits for it at most d; past that it returns ErrNotClosed and
// leaves close running: a client whose broker stopped answering must not keep a stopping
// process.
func CloseWithin(d time.Duration, what string, close func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := Await(ctx, close)
	if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w within %s", what, ErrNotClosed, d)
	}
	return err
}

// ErrNotClosed is CloseWithin's error when close did not end in time.
var ErrNotClosed = errors.New("not closed")

// closeTimeout bounds the close of a Kafka client at shutdown.
const closeTimeout = 5 * time.Second

// envelope is Watermill's forwarder envelope (requeued dead letters name their topic).
type envelope struct {
	DestinationTopic string            `json:"destination_topic"`
	UUID             string            `json:"uuid"`
	Payload          []byte            `json:"payload"`
	Metadata         map[string]string `json:"metadata"`
}

var envelopeKey = []byte(`"destination_topic"`)

// producerMessage turns an outbox message into the Kafka message Watermill would
// produce: the message UUID and metadata as headers, the user id as key. A forwarder
// envelope is unwrapped and goes to the topic it names, without the name of an outbox
// row: the envelope's row is not the message's (its uuid is the envelope's), and the
// metadata a requeued dead letter kept names the row it first came from. The prune
// deletes the envelope's row once the message is applied.
func (r *Relay) producerMessage(msg *message.Message) (*sarama.ProducerMessage, error) {
	var env envelope
	// Only an envelope names a destination topic (Watermill's forwarder writes the key as
	// it is); a command is not decoded twice to find that out.
	if bytes.Contains(msg.Payload, envelopeKey) && json.Unmarshal(msg.Payload, &env) == nil && env.DestinationTopic != "" {
		inner := message.NewMessage(env.UUID, env.Payload)
		inner.Metadata = env.Metadata
		delete(inner.Metadata, messages.MetaOutboxRow)
		return marshaler.Marshal(env.DestinationTopic, inner)
	}
	return marshaler.Marshal(r.cfg.Topic, msg)
}

func (r *Relay) pruneLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for shard := range r.cfg.Shards {
			for {
				n, err := r.outbox.Prune(ctx, shard, 5000)
				if err != nil {
					if ctx.Err() == nil {
						r.logger.Warn("outbox prune failed", "shard", shard, "err", err)
					}
					break
				}
				if n < 5000 {
					break
				}
			}
		}
	}
}

// pacer spreads forwarded messages to at most rate per second over every shard (no cap
// when rate is 0).
type pacer struct {
	rate float64
	mu   sync.Mutex
	next time.Time
}

func newPacer(rate float64) *pacer { return &pacer{rate: rate} }

// wait blocks until n more messages may go.
func (p *pacer) wait(ctx context.Context, n int) {
	if p.rate <= 0 {
		return
	}
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	p.mu.Unlock()
	if d := time.Until(at); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}
