package router

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/metrics"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/openleaderboard/leaderboard/handlers"
)

// ProjectorHandlerName names the projector's handler in logs, metrics and dead letters;
// it never changes, so dead letters keep pointing at it.
const ProjectorHandlerName = "apply-score"

// ProjectorGroup is the Kafka consumer group of the projector.
const ProjectorGroup = "leaderboard-projector"

// DeadLetterTopic is the poison topic name recorded for dead letters.
const DeadLetterTopic = "dead_letters"

// NewProjectorRouter builds the projector's router: the apply-score handler on the score
// topic, behind correlation id, poison queue (permanent errors and panics only), retry
// with exponential backoff (transient errors only), timeout, and recoverer, in that order.
//
// presizeStack goes outermost; then throttle, when set (n per per), caps how fast messages
// are handled, across every partition; then stuck, when set, tracks partitions that keep
// failing.
func NewProjectorRouter(sub message.Subscriber, topic string, handle message.NoPublishHandlerFunc, deadLetters message.Publisher, stuck *StuckPartitions, throttle Throttle, reg prometheus.Registerer, logger *slog.Logger) (*message.Router, error) {
	wlog := NewLogger(logger.With("role", "projector"))
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 20 * time.Second}, wlog)
	if err != nil {
		return nil, fmt.Errorf("projector router: %w", err)
	}
	poison, err := middleware.PoisonQueueWithFilter(deadLetters, DeadLetterTopic, shouldPoison)
	if err != nil {
		return nil, fmt.Errorf("projector poison queue: %w", err)
	}
	r.AddMiddleware(presizeStack)
	if throttle.N > 0 {
		r.AddMiddleware(middleware.NewThrottle(int64(throttle.N), throttle.Per).Middleware)
	}
	if stuck != nil {
		r.AddMiddleware(stuck.Middleware)
	}
	r.AddMiddleware(projectorMiddleware(poison, wlog, logger)...)
	// Innermost: every attempt is measured, so failed attempts count the retries.
	addMetrics(r, reg)
	r.AddConsumerHandler(ProjectorHandlerName, topic, sub, handle)
	return r, nil
}

// presizeStack, outermost, grows the stack of the goroutine Watermill starts for each
// message to stackFor at once, while it holds two frames. Otherwise it grows at the
// bottom of the middleware chain, about 3 KB down, where copying it means walking some
// twenty frames: 5 % of the service's CPU at saturation went to that copy
// (runtime.copystack under Batcher.Go, in a profile of 20 s).
func presizeStack(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		touchStack(0)
		return h(msg)
	}
}

// stackFor is the stack a message's goroutine gets at once: the chain to the handler's
// wait takes about 3.5 KB of frames, and Go grows a stack by doubling, to 8 KB here.
const stackFor = 6 << 10

// touchStack has a frame of stackFor bytes, so that its call grows the stack past it.
// Called with 0 it never touches the frame (zeroing it would cost as much as the copy
// it saves); any other i, which the compiler cannot rule out, would.
//
//go:noinline
func touchStack(i int) byte {
	if i == 0 {
		return 0
	}
	var frame [stackFor]byte
	frame[i%stackFor] = 1
	return frame[stackFor-1-i%stackFor]
}

// projectorMiddleware is the projector's chain from the correlation id to the recoverer.
func projectorMiddleware(poison message.HandlerMiddleware, wlog watermill.LoggerAdapter, logger *slog.Logger) []message.HandlerMiddleware {
	return []message.HandlerMiddleware{
		middleware.CorrelationID,
		poison,
		retryFailures(middleware.Retry{
			MaxRetries:          4,
			InitialInterval:     100 * time.Millisecond,
			MaxInterval:         2 * time.Second,
			Multiplier:          2,
			MaxElapsedTime:      10 * time.Second,
			RandomizationFactor: 0.2,
			ResetContextOnRetry: true,
			Logger:              wlog,
		}),
		stopRetryOnPermanent,
		logAttempts(logger.With("role", "projector", "handler", ProjectorHandlerName)),
		middleware.Timeout(20 * time.Second),
		middleware.Recoverer,
	}
}

// Throttle is a cap of N messages per Per (zero: none).
type Throttle struct {
	N   int
	Per time.Duration
}

// shouldPoison sends only messages that can never succeed to the dead letters:
// infrastructure errors are returned, so the message is redelivered until it applies.
func shouldPoison(err error) bool {
	var panicked middleware.RecoveredPanicError
	return handlers.IsPermanent(err) || errors.As(err, &panicked)
}

// retryFailures runs a message's first attempt straight down the chain and hands only a
// message whose first attempt failed to retry (Watermill's Retry), which is then given
// that failure as its own first attempt's: it waits, retries and gives up as it would
// have, its MaxElapsedTime counted from the first attempt. Retry builds its backoff and
// options for every message, about a dozen allocations, before its first attempt; nearly
// every message succeeds at once. A permanent failure (stopRetryOnPermanent) is returned
// at once, as Retry would (even when the context ended meanwhile, which Retry checks only
// before an attempt); a message whose context has ended goes to Retry unattempted, as
// Retry refuses it; a failed one goes with the context it came with, not the one its
// attempt ended (Timeout's).
func retryFailures(cfg middleware.Retry) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			if ctx.Err() != nil {
				return cfg.Middleware(h)(msg)
			}
			start := time.Now()
			out, err := h(msg)
			if err == nil {
				return out, nil
			}
			var permanent *backoff.PermanentError
			if errors.As(err, &permanent) {
				return out, permanent.Unwrap()
			}
			retry := cfg
			if retry.MaxElapsedTime > 0 {
				// Retry's limit runs from its own first attempt, the replayed failure.
				if retry.MaxElapsedTime -= time.Since(start); retry.MaxElapsedTime <= 0 {
					return out, err
				}
			}
			msg.SetContext(ctx) // the attempt's own (Timeout's) has ended; Retry keeps this one
			replayed := false
			return retry.Middleware(func(m *message.Message) ([]*message.Message, error) {
				if !replayed {
					replayed = true
					return out, err
				}
				return h(m)
			})(msg)
		}
	}
}

// stopRetryOnPermanent ends Retry's loop at a permanent error: a message that can never
// apply goes to the dead letters on its first attempt instead of holding back its
// partition for the whole backoff. It marks the error with backoff.Permanent, which Retry
// unwraps again, rather than using Retry.ShouldRetry: in watermill v1.5.1 ShouldRetry
// advances the backoff on every call and so doubles the waits between real retries.
func stopRetryOnPermanent(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if handlers.IsPermanent(err) {
			return out, backoff.Permanent(err)
		}
		return out, err
	}
}

// addMetrics adds Watermill's Prometheus metrics of handlers (time and result of every
// attempt) and of publishers (publish time) to a router. Its subscriber decorator
// (subscriber_messages_received_total) is left out: it relays every message through a
// channel of its own and starts a goroutine per message to wait for its ack, about 5 %
// of the service's CPU at saturation (the handler metric counts the same messages).
func addMetrics(r *message.Router, reg prometheus.Registerer) {
	if reg != nil {
		b := metrics.NewPrometheusMetricsBuilder(reg, "leaderboard", "watermill")
		r.AddPublisherDecorators(b.DecoratePublisher)
		r.AddMiddleware(b.NewRouterMiddleware().Middleware)
	}
}

// logAttempts logs every failed attempt (warn) and every handled message (debug) with the
// correlation id the API gave the request and the event id, so one score can be followed
// from the HTTP request through the outbox and Kafka to the projector.
func logAttempts(logger *slog.Logger) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			level, text := slog.LevelDebug, "message handled"
			if err != nil {
				level, text = slog.LevelWarn, "handler attempt failed"
			}
			if !logger.Enabled(msg.Context(), level) { // the attributes cost a few allocations a message
				return out, err
			}
			attrs := []any{"correlation_id", middleware.MessageCorrelationID(msg), "event_id", msg.Metadata.Get("event_id"), "message_uuid", msg.UUID}
			if err != nil {
				attrs = append(attrs, "err", err)
			}
			logger.Log(msg.Context(), level, text, attrs...)
			return out, err
		}
	}
}
