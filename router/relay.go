package router

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/openleaderboard/leaderboard/storage"
)

// RelayConfig configures the relay.
type RelayConfig struct {
	Shards  int
	Brokers []string
	// PollInterval is how long an idle forwarder waits before asking PostgreSQL again.
	PollInterval time.Duration
	// PruneInterval is how often applied outbox rows are deleted.
	PruneInterval time.Duration
}

// Relay forwards the SQL outbox to Kafka: one Watermill forwarder per outbox shard,
// each reading its table through a watermill-sql subscriber and producing to Kafka with
// the user id as partition key.
type Relay struct {
	forwarders []*forwarder.Forwarder
	publishers []*kafka.Publisher
	maint      *storage.OutboxMaintenance
	cfg        RelayConfig
	logger     *slog.Logger
	running    chan struct{}
}

// NewRelay builds the forwarders; Run starts them.
func NewRelay(db *sql.DB, maint *storage.OutboxMaintenance, schema storage.OutboxSchema, cfg RelayConfig, reg prometheus.Registerer, logger *slog.Logger) (*Relay, error) {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.PruneInterval <= 0 {
		cfg.PruneInterval = 5 * time.Second
	}
	r := &Relay{maint: maint, cfg: cfg, logger: logger, running: make(chan struct{})}
	wlog := NewLogger(logger.With("role", "relay"))
	for shard := 0; shard < cfg.Shards; shard++ {
		sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{
			ConsumerGroup:  storage.RelayConsumerGroup,
			PollInterval:   cfg.PollInterval,
			ResendInterval: 200 * time.Millisecond,
			RetryInterval:  time.Second,
			SchemaAdapter:  schema.Messages,
			OffsetsAdapter: schema.Offsets,
		}, wlog)
		if err != nil {
			return nil, fmt.Errorf("relay shard %d subscriber: %w", shard, err)
		}
		pub, err := NewKafkaPublisher(cfg.Brokers, wlog)
		if err != nil {
			return nil, err
		}
		r.publishers = append(r.publishers, pub)
		fr, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, wlog)
		if err != nil {
			return nil, fmt.Errorf("relay shard %d router: %w", shard, err)
		}
		addMetrics(fr, reg)
		f, err := forwarder.NewForwarder(sub, pub, wlog, forwarder.Config{ForwarderTopic: schema.Topic(shard), Router: fr})
		if err != nil {
			return nil, fmt.Errorf("relay shard %d forwarder: %w", shard, err)
		}
		r.forwarders = append(r.forwarders, f)
		if reg != nil {
			shard := shard
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

// Run rewinds every shard past what was acknowledged but never applied, then forwards
// and prunes until ctx ends.
func (r *Relay) Run(ctx context.Context) error {
	for shard := range r.forwarders {
		n, err := r.maint.Rewind(ctx, shard)
		if err != nil {
			return err
		}
		if n > 0 {
			r.logger.Info("relay rewound outbox to the oldest unapplied command", "shard", shard, "rows", n)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, f := range r.forwarders {
		g.Go(func() error { return f.Run(gctx) })
	}
	g.Go(func() error {
		for _, f := range r.forwarders {
			select {
			case <-f.Running():
			case <-gctx.Done():
				return nil
			}
		}
		close(r.running)
		return nil
	})
	g.Go(func() error { r.pruneLoop(gctx); return nil })
	err := g.Wait()
	return errors.Join(err, r.close())
}

// Running is closed once every forwarder runs.
func (r *Relay) Running() <-chan struct{} { return r.running }

func (r *Relay) pruneLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for shard := range r.forwarders {
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

func (r *Relay) close() error {
	var errs []error
	for _, f := range r.forwarders {
		errs = append(errs, f.Close())
	}
	for _, p := range r.publishers {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
