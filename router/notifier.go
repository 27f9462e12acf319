package router

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// Handler names of the notifier; they never change.
const (
	NotifyTopHandlerName   = "notify-top-changed"
	NotifyUsersHandlerName = "notify-scores-applied"
)

// NewNotifierRouter builds the router every API process runs: the notification topics
// read without a consumer group (each process sees every update), from the newest
// offset, into the process's realtime hub.
func NewNotifierRouter(brokers []string, t Topics, top, users message.NoPublishHandlerFunc, reg prometheus.Registerer, logger *slog.Logger) (*message.Router, error) {
	wlog := NewLogger(logger.With("role", "notifier"))
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, wlog)
	if err != nil {
		return nil, fmt.Errorf("notifier router: %w", err)
	}
	r.AddMiddleware(middleware.Recoverer)
	addMetrics(r, reg)
	for _, h := range []struct {
		name, topic string
		fn          message.NoPublishHandlerFunc
	}{{NotifyTopHandlerName, t.Notifications, top}, {NotifyUsersHandlerName, t.UserUpdates, users}} {
		sub, err := newLatestSubscriber(brokers, wlog)
		if err != nil {
			return nil, err
		}
		r.AddConsumerHandler(h.name, h.topic, sub, h.fn)
	}
	return r, nil
}

// newLatestSubscriber reads every partition without a consumer group, from the newest
// offset: a notification older than the process is of no use to it.
func newLatestSubscriber(brokers []string, logger watermill.LoggerAdapter) (*kafka.Subscriber, error) {
	cfg := kafka.DefaultSaramaSubscriberConfig()
	cfg.Version = KafkaVersion
	cfg.Consumer.Offsets.Initial = sarama.OffsetNewest
	cfg.Consumer.MaxWaitTime = 500 * time.Millisecond // how long an idle fetch waits; data ends it at once
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers: brokers, Unmarshaler: marshaler, OverwriteSaramaConfig: cfg,
		NackResendSleep: 100 * time.Millisecond, ReconnectRetrySleep: time.Second,
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("kafka notification subscriber: %w", err)
	}
	return sub, nil
}

// NotificationTopicsReady tells whether Kafka answers and holds the notification topics,
// with a client of short timeouts that it closes: the notifier's router is built only
// then, as one whose subscription fails leaves a goroutine and a client behind
// (watermill's router, watermill-kafka's subscriber), and an API process tries again every
// second while Kafka is down or the relay and projector have not created the topics yet.
func NotificationTopicsReady(ctx context.Context, brokers []string, t Topics) error {
	cfg := sarama.NewConfig()
	cfg.Version = KafkaVersion
	cfg.Net.DialTimeout, cfg.Net.ReadTimeout, cfg.Net.WriteTimeout = 3*time.Second, 3*time.Second, 3*time.Second
	cfg.Metadata.Retry.Max = 0
	done := make(chan error, 1)
	go func() {
		client, err := sarama.NewClient(brokers, cfg)
		if err != nil {
			done <- err
			return
		}
		defer client.Close()
		topics, err := client.Topics()
		if err != nil {
			done <- err
			return
		}
		for _, want := range []string{t.Notifications, t.UserUpdates} {
			if !slices.Contains(topics, want) {
				done <- fmt.Errorf("kafka topic %s does not exist (the relay and projector create it)", want)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
