package router

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/openleaderboard/leaderboard/storage"
)

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
}

// Relay forwards the SQL outbox to Kafka in batches: per shard, it reads up to Batch rows
// after its position (rows of write transactions still open are left for later, as
// watermill-sql does), produces them in one request, then moves its position (in the
// shard's watermill-sql offsets table). At least once: a crash between produce and ack
// forwards the batch again, and Run rewinds to the oldest unapplied command first.
// Ordering per user holds: a user's commands are in one shard, read in commit order, and
// produced by an idempotent producer with one request in flight. One relay process works
// a shard at a time (a session advisory lock); others stand by. An outbox commit's
// NOTIFY wakes it, so it is quiet when idle.
type Relay struct {
	pool     *pgxpool.Pool
	producer sarama.SyncProducer
	maint    *storage.OutboxMaintenance
	schema   storage.OutboxSchema
	cfg      RelayConfig
	logger   *slog.Logger
	wake     []chan struct{}
	running  chan struct{}
	pace     *pacer

	batches  prometheus.Histogram
	produced prometheus.Counter
	duration prometheus.Histogram
}

// NewRelay connects the producer; Run starts forwarding.
func NewRelay(pool *pgxpool.Pool, maint *storage.OutboxMaintenance, schema storage.OutboxSchema, cfg RelayConfig, reg prometheus.Registerer, logger *slog.Logger) (*Relay, error) {
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
	r := &Relay{pool: pool, producer: producer, maint: maint, schema: schema, cfg: cfg, logger: logger.With("role", "relay"),
		running: make(chan struct{}), pace: newPacer(cfg.Throttle),
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leaderboard_relay_batch_size",
			Help: "Outbox rows forwarded to Kafka per produce request.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		produced: prometheus.NewCounter(prometheus.CounterOpts{Name: "leaderboard_relay_messages_total",
			Help: "Outbox rows forwarded to Kafka (a batch forwarded again after a crash counts again)."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leaderboard_relay_batch_seconds",
			Help: "Time to read, produce and acknowledge one batch.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
	}
	for range cfg.Shards {
		r.wake = append(r.wake, make(chan struct{}, 1))
	}
	if reg != nil {
		reg.MustRegister(r.batches, r.produced, r.duration)
		for shard := range cfg.Shards {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "leaderboard_outbox_backlog", Help: "Outbox rows of a shard the relay has not forwarded yet.",
				ConstLabels: prometheus.Labels{"shard": strconv.Itoa(shard)},
			}, func() float64 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				n, err := maint.Backlog(ctx, shard)
				if err != nil {
					return -1
				}
				return float64(n)
			}))
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

// Run rewinds every shard past what was acknowledged but never applied, then forwards
// and prunes until ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	defer r.producer.Close()
	for shard := range r.cfg.Shards {
		n, err := r.maint.Rewind(ctx, shard)
		if err != nil {
			return err
		}
		if n > 0 {
			r.logger.Info("relay rewound outbox to the oldest unapplied command", "shard", shard, "rows", n)
		}
	}
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
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+storage.OutboxChannel); err != nil {
		return err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "UNLISTEN *") }()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if shard, err := strconv.Atoi(n.Payload); err == nil && shard >= 0 && shard < len(r.wake) {
			r.signal(shard)
		}
	}
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

// relayLock is the session advisory lock of a shard's relay.
const relayLock = `SELECT pg_try_advisory_lock(hashtextextended('leaderboard-relay:' || $1::text, 0))`

// holdShard takes the shard's lock on a connection of its own and forwards batches on it
// until ctx ends or the connection fails (which releases the lock).
func (r *Relay) holdShard(ctx context.Context, shard int) error {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, relayLock, strconv.Itoa(shard)).Scan(&locked); err != nil {
		conn.Conn().Close(ctx) //nolint:errcheck // a broken connection is dropped
		return err
	}
	if !locked {
		return nil // another relay forwards this shard; try again later
	}
	// The lock lives as long as this session: close it rather than return it to the pool.
	defer func() { _ = conn.Conn().Close(context.WithoutCancel(ctx)) }()
	r.logger.Info("relay forwards shard", "shard", shard)
	topic := r.schema.Topic(shard)
	msgs, offs := r.schema.Messages.MessagesTable(topic), r.schema.Offsets.MessagesOffsetsTable(topic)
	for {
		start := time.Now()
		n, pending, err := r.forward(ctx, conn.Conn(), msgs, offs)
		if err != nil {
			return err
		}
		if n > 0 {
			r.duration.Observe(time.Since(start).Seconds())
		}
		if n == r.cfg.Batch {
			continue // more where these came from
		}
		wait := r.cfg.IdleInterval
		if pending { // rows behind a transaction still open: look again soon
			wait = r.cfg.PollInterval
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake[shard]:
		case <-time.After(wait):
		}
	}
}

// outboxRow is one row of an outbox table.
type outboxRow struct {
	offset   int64
	txID     string
	uuid     string
	payload  []byte
	metadata []byte
}

// forward reads a batch after the relay's position, produces it and moves the position.
// pending says rows exist after the new position that could not be read yet (a write
// transaction older than them is still open). The position, the rows and whether each
// may be read come in one statement.
func (r *Relay) forward(ctx context.Context, conn *pgx.Conn, msgs, offs string) (n int, pending bool, err error) {
	rows, err := conn.Query(ctx, `
		WITH pos AS (
			SELECT coalesce((SELECT offset_acked FROM `+offs+` WHERE consumer_group = $1), 0) AS o,
			       coalesce((SELECT last_processed_transaction_id FROM `+offs+` WHERE consumer_group = $1), '0'::xid8) AS tx
		)
		SELECT m."offset", m.transaction_id::text, m.uuid, m.payload::text, coalesce(m.metadata::text, '{}'),
		       m.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
		FROM `+msgs+` m, pos
		WHERE (m.transaction_id = pos.tx AND m."offset" > pos.o) OR m.transaction_id > pos.tx
		ORDER BY m.transaction_id, m."offset" LIMIT $2`, storage.RelayConsumerGroup, r.cfg.Batch)
	if err != nil {
		return 0, false, err
	}
	var batch []outboxRow
	for rows.Next() {
		var o outboxRow
		var payload, meta string
		var ready bool
		if err := rows.Scan(&o.offset, &o.txID, &o.uuid, &payload, &meta, &ready); err != nil {
			rows.Close()
			return 0, false, err
		}
		if !ready { // this row and the ones after it wait for an older transaction
			pending = true
			break
		}
		o.payload, o.metadata = []byte(payload), []byte(meta)
		batch = append(batch, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, false, err
	}
	if len(batch) == 0 {
		return 0, pending, nil
	}
	out := make([]*sarama.ProducerMessage, 0, len(batch))
	for _, o := range batch {
		pm, err := r.producerMessage(o)
		if err != nil {
			return 0, false, err
		}
		out = append(out, pm)
	}
	r.pace.wait(ctx, len(out))
	if err := r.producer.SendMessages(out); err != nil {
		return 0, false, fmt.Errorf("produce %d messages: %w", len(out), err)
	}
	last := batch[len(batch)-1]
	if _, err := conn.Exec(ctx, `
		INSERT INTO `+offs+` (consumer_group, offset_acked, last_processed_transaction_id) VALUES ($1, $2, $3::xid8)
		ON CONFLICT (consumer_group) DO UPDATE SET offset_acked = excluded.offset_acked,
			last_processed_transaction_id = excluded.last_processed_transaction_id`,
		storage.RelayConsumerGroup, last.offset, last.txID); err != nil {
		return 0, false, err
	}
	r.batches.Observe(float64(len(batch)))
	r.produced.Add(float64(len(batch)))
	return len(batch), pending, nil
}

// envelope is Watermill's forwarder envelope (requeued dead letters name their topic).
type envelope struct {
	DestinationTopic string            `json:"destination_topic"`
	UUID             string            `json:"uuid"`
	Payload          []byte            `json:"payload"`
	Metadata         map[string]string `json:"metadata"`
}

// producerMessage turns an outbox row into the Kafka message Watermill would produce:
// the message UUID and metadata as headers, the user id as key.
func (r *Relay) producerMessage(o outboxRow) (*sarama.ProducerMessage, error) {
	var env envelope
	if json.Unmarshal(o.payload, &env) == nil && env.DestinationTopic != "" {
		msg := message.NewMessage(env.UUID, env.Payload)
		msg.Metadata = env.Metadata
		return marshaler.Marshal(env.DestinationTopic, msg)
	}
	msg := message.NewMessage(o.uuid, o.payload)
	if err := json.Unmarshal(o.metadata, &msg.Metadata); err != nil {
		return nil, fmt.Errorf("outbox row %d: metadata: %w", o.offset, err)
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
				n, err := r.maint.Prune(ctx, shard, 5000)
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
