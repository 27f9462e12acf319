package router

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
)

// KafkaVersion is the protocol version spoken to the brokers (Apache Kafka 3.6+; kfake).
var KafkaVersion = sarama.V3_6_0_0

// Topics are the Kafka topics of one deployment.
type Topics struct {
	Scores          string
	ScorePartitions int32
	// Notifications carries LeaderboardChanged, compacted, keyed by board and period.
	Notifications string
	// UserUpdates carries ScoresApplied (which users' entries changed), kept an hour.
	UserUpdates string
}

// NewTopics names the topics under a prefix.
func NewTopics(prefix string, scorePartitions int) Topics {
	return Topics{Scores: prefix + ".score-events", ScorePartitions: int32(scorePartitions),
		Notifications: prefix + ".notifications", UserUpdates: prefix + ".user-updates"}
}

// EmbeddedKafka is the in-process Kafka-protocol broker of `make run` and the tests.
type EmbeddedKafka struct {
	cluster *kfake.Cluster
}

// StartEmbeddedKafka starts a single-broker kfake cluster persisting to dataDir (no
// persistence when empty) on the given port (0 picks a free one).
func StartEmbeddedKafka(dataDir string, port int) (*EmbeddedKafka, error) {
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(port), kfake.ClusterID("leaderboard-embedded")}
	if dataDir != "" {
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return nil, fmt.Errorf("embedded kafka data dir: %w", err)
		}
		opts = append(opts, kfake.DataDir(dataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded kafka: %w", err)
	}
	return &EmbeddedKafka{cluster: c}, nil
}

// Addrs returns the broker addresses.
func (e *EmbeddedKafka) Addrs() []string { return e.cluster.ListenAddrs() }

// Close stops the broker, flushing what it persists.
func (e *EmbeddedKafka) Close() { e.cluster.Close() }

// TopicSettingsError is EnsureTopics failing to give an existing topic its settings (a
// broker whose ACLs let the service use topics but not alter them): the topics work, so a
// caller may go on and warn.
type TopicSettingsError struct {
	Topic string
	Err   error
}

func (e TopicSettingsError) Error() string {
	return fmt.Sprintf("kafka set the retention of topic %s (set cleanup.policy=compact,delete and retention.ms=86400000 with Kafka's tools): %v", e.Topic, e.Err)
}

func (e TopicSettingsError) Unwrap() error { return e.Err }

// EnsureTopics creates the topics that do not exist yet: the score events partitioned
// by user, and the notifications keyed by board and period (compacted, kept a day).
func EnsureTopics(ctx context.Context, brokers []string, t Topics) error {
	// sarama's admin takes no context, and against a broker that accepts connections but
	// never answers each request waits out a read timeout, retried: a process told to stop
	// while starting does not wait for it (the admin is left to time out).
	err := Await(ctx, func() error { return ensureTopics(brokers, t) })
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("kafka topics: %w", err)
	}
	return err
}

func ensureTopics(brokers []string, t Topics) error {
	cfg := sarama.NewConfig()
	cfg.Version = KafkaVersion
	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	if err != nil {
		return fmt.Errorf("kafka admin: %w", err)
	}
	defer admin.Close()
	// Notifications are read from the newest offset only: compacted (one per board period)
	// and deleted after a day, or every day and every match would keep its last top forever.
	compact, day, hour := "compact,delete", "86400000", "3600000"
	want := map[string]*sarama.TopicDetail{
		t.Scores:        {NumPartitions: t.ScorePartitions, ReplicationFactor: -1},
		t.Notifications: {NumPartitions: 3, ReplicationFactor: -1, ConfigEntries: map[string]*string{"cleanup.policy": &compact, "retention.ms": &day}},
		t.UserUpdates:   {NumPartitions: 3, ReplicationFactor: -1, ConfigEntries: map[string]*string{"retention.ms": &hour}},
	}
	existing, err := admin.ListTopics()
	if err != nil {
		return fmt.Errorf("kafka list topics: %w", err)
	}
	var settings error
	for name, detail := range want {
		if _, ok := existing[name]; ok {
			if name == t.Notifications {
				// Created by a version that only compacted it: give it its day's retention
				// (incrementally: other settings an operator made stay).
				set := map[string]sarama.IncrementalAlterConfigsEntry{}
				for k, v := range detail.ConfigEntries {
					set[k] = sarama.IncrementalAlterConfigsEntry{Operation: sarama.IncrementalAlterConfigsOperationSet, Value: v}
				}
				if err := admin.IncrementalAlterConfig(sarama.TopicResource, name, set, false); err != nil {
					settings = TopicSettingsError{Topic: name, Err: err}
				}
			}
			continue
		}
		err := admin.CreateTopic(name, detail, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("kafka create topic %s: %w", name, err)
		}
	}
	return settings
}

// marshaler takes the Kafka key from the message metadata (messages.MetaPartitionKey):
// the user id for score events, board and period for notifications.
var marshaler = wireMarshaler{}

// NewKafkaPublisher returns a synchronous, idempotent publisher that waits for all
// in-sync replicas. Each role gets its own: a router closes the publishers it is given.
func NewKafkaPublisher(brokers []string, logger watermill.LoggerAdapter) (*kafka.Publisher, error) {
	cfg := kafka.DefaultSaramaSyncPublisherConfig()
	cfg.Version = KafkaVersion
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Retry.Max = 10
	cfg.Producer.Retry.Backoff = 100 * time.Millisecond
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{Brokers: brokers, Marshaler: marshaler, OverwriteSaramaConfig: cfg}, logger)
	if err != nil {
		return nil, fmt.Errorf("kafka publisher: %w", err)
	}
	return pub, nil
}

// NewKafkaSubscriber returns a consumer-group subscriber keeping up to window messages
// of each partition in flight (see WindowSubscriber), starting from the oldest offset when
// the group has none, committing marked offsets automatically, fetching in batches.
func NewKafkaSubscriber(brokers []string, group string, window int, logger watermill.LoggerAdapter) (*WindowSubscriber, error) {
	cfg := kafka.DefaultSaramaSubscriberConfig()
	cfg.Version = KafkaVersion
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = true
	cfg.Consumer.Offsets.AutoCommit.Interval = 500 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 60 * time.Second
	// A fetch is answered as soon as a message waits (an idle one after 500 ms, so an idle
	// consumer fetches twice a second; both are sarama's defaults, set here on purpose).
	// Under load the relay's produce requests already carry batches (its reads are spaced
	// by the load), so a fetch brings a batch, not a message: at 2,000 writes/s and at
	// saturation this costs no more CPU per event than waiting for 16 KiB or 100 ms did,
	// and a lone score is visible in about 10 ms instead of 65 (at 200 writes/s, p50).
	cfg.Consumer.Fetch.Min = 1
	cfg.Consumer.MaxWaitTime = 500 * time.Millisecond
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	sub, err := NewWindowSubscriber(WindowSubscriberConfig{
		Brokers: brokers, ConsumerGroup: group, Sarama: cfg, Unmarshaler: marshaler, Window: window,
		NackResendSleep: 100 * time.Millisecond, ReconnectRetrySleep: time.Second,
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("kafka subscriber: %w", err)
	}
	return sub, nil
}
