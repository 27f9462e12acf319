package router

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
)

// WindowSubscriber is a Watermill subscriber over a Kafka consumer group that keeps up to
// Window messages of each partition in flight at once, where watermill-kafka's keeps one:
// it reads at most Window from the oldest one not acked yet and hands each out once no
// earlier message of its key is in flight.
// With one, the projector's batches can hold at most one message per partition, so its
// throughput needed many partitions, and every fetch and produce then spread its records
// over all of them (at 192 partitions and 5,000 writes/s about one record per partition
// per request, and a quarter of the service's CPU in the broker and the Kafka clients).
//
// What stays as it was:
//   - Order per key: a message waits while an earlier message with its key (the user) is
//     in flight, so one user's commands are handed over, and applied, one after the other;
//     other users' messages pass it, within the window.
//   - At-least-once: a partition's offset is marked only past messages that are all acked,
//     so a crash or a rebalance redelivers from the oldest message not acked, never skips
//     one; the projector applies a redelivered command once (by event id).
//   - A Nack resends the same message after NackResendSleep, holding its key.
//   - Losing the broker ends the group; the subscriber reconnects after
//     ReconnectRetrySleep, as watermill-kafka's does.
//
// A revoked partition stops handing out messages and waits up to DrainTimeout for the
// ones in flight, marking what they ack, so the next owner starts after them.
type WindowSubscriber struct {
	cfg    WindowSubscriberConfig
	logger watermill.LoggerAdapter

	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	drains    atomic.Int64 // revoked claims that drained (tests wait for one)
	claims    atomic.Int64 // claims started, numbering them
	// released, when set (OnRelease), is told of every claim that ended.
	released func(partition int32, claim int64)
}

// OnRelease has f told the partition and number of every claim that ends (a rebalance
// took the partition, or the session ended), once its messages in flight drained or were
// given up. Call it before Subscribe.
func (s *WindowSubscriber) OnRelease(f func(partition int32, claim int64)) { s.released = f }

// WindowSubscriberConfig configures a WindowSubscriber.
type WindowSubscriberConfig struct {
	Brokers       []string
	ConsumerGroup string
	Sarama        *sarama.Config
	Unmarshaler   kafka.Unmarshaler
	// Window is how many messages of one partition may be in flight (default 1).
	Window int
	// NackResendSleep is the wait before a nacked message is handed out again.
	NackResendSleep time.Duration
	// ReconnectRetrySleep is the wait before the group is joined again after it failed.
	ReconnectRetrySleep time.Duration
	// DrainTimeout bounds how long a revoked partition waits for its messages in flight.
	DrainTimeout time.Duration
}

// NewWindowSubscriber returns a subscriber; Subscribe joins the group.
func NewWindowSubscriber(cfg WindowSubscriberConfig, logger watermill.LoggerAdapter) (*WindowSubscriber, error) {
	if len(cfg.Brokers) == 0 || cfg.ConsumerGroup == "" || cfg.Sarama == nil || cfg.Unmarshaler == nil {
		return nil, errors.New("window subscriber: brokers, consumer group, sarama config and unmarshaler are required")
	}
	if cfg.Window <= 0 {
		cfg.Window = 1
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 5 * time.Second
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return &WindowSubscriber{cfg: cfg, logger: logger, closing: make(chan struct{})}, nil
}

// Close stops consuming: messages in flight are abandoned (Kafka hands them out again
// from the last marked offset), and every channel Subscribe returned is closed.
func (s *WindowSubscriber) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.wg.Wait()
	return nil
}

// Subscribe joins the consumer group on topic. The first connection must succeed;
// later failures reconnect until Close or ctx ends.
func (s *WindowSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	select {
	case <-s.closing:
		return nil, errors.New("window subscriber: closed")
	default:
	}
	group, err := sarama.NewConsumerGroup(s.cfg.Brokers, s.cfg.ConsumerGroup, s.cfg.Sarama)
	if err != nil {
		return nil, fmt.Errorf("window subscriber: join %s: %w", s.cfg.ConsumerGroup, err)
	}
	output := make(chan *message.Message)
	fields := watermill.LogFields{"topic": topic, "consumer_group": s.cfg.ConsumerGroup}
	ctx, cancel := context.WithCancel(ctx)
	s.wg.Go(func() {
		defer cancel()
		select {
		case <-s.closing:
		case <-ctx.Done():
		}
	})
	h := &windowHandler{s: s, ctx: ctx, output: output}
	s.wg.Go(func() {
		defer close(output)
		defer h.messages.Wait() // no message goroutine may send on output once it is closed
		for {
			s.consume(ctx, group, topic, h, fields)
			if ctx.Err() != nil {
				return
			}
			s.logger.Info("Kafka consumer group stopped, joining again", fields)
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.cfg.ReconnectRetrySleep):
			}
			g, err := sarama.NewConsumerGroup(s.cfg.Brokers, s.cfg.ConsumerGroup, s.cfg.Sarama)
			if err != nil {
				s.logger.Error("Cannot join the Kafka consumer group", err, fields)
				continue
			}
			group = g
		}
	})
	return output, nil
}

// consume runs the group until it fails or ctx ends, then closes it. Once ctx ended it
// waits for that at most closeTimeout: a session's release commits offsets, and a broker
// that stopped answering would keep a stopping process (offsets not committed are read
// again and found applied).
func (s *WindowSubscriber) consume(ctx context.Context, group sarama.ConsumerGroup, topic string, h *windowHandler, fields watermill.LogFields) {
	run := func() {
		errsDone := make(chan struct{})
		go func() {
			defer close(errsDone)
			for err := range group.Errors() {
				s.logger.Error("Kafka consumer error", err, fields)
			}
		}()
		for ctx.Err() == nil {
			// Consume returns at every rebalance; it is called again to rejoin.
			if err := group.Consume(ctx, []string{topic}, h); err != nil {
				if !errors.Is(err, sarama.ErrClosedConsumerGroup) {
					s.logger.Error("Kafka consumer group failed", err, fields)
				}
				break
			}
		}
		if err := group.Close(); err != nil {
			s.logger.Info("Kafka consumer group closed with an error", fields.Add(watermill.LogFields{"err": err.Error()}))
		}
		<-errsDone
	}
	if !AwaitStop(ctx, closeTimeout, run) {
		s.logger.Info("Kafka consumer group not closed in time; left behind", fields.Add(watermill.LogFields{"after": closeTimeout.String()}))
	}
}

// windowHandler is the sarama.ConsumerGroupHandler: one ConsumeClaim per partition.
type windowHandler struct {
	s        *WindowSubscriber
	ctx      context.Context
	output   chan<- *message.Message
	messages sync.WaitGroup // the goroutines awaiting acks (they resend on output)
}

func (*windowHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (*windowHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// slot is one message of a partition, read and not yet marked.
type slot struct {
	kafka *sarama.ConsumerMessage
	key   string
	msg   *message.Message
	ctx   context.Context
	acked bool
}

// outcome is what became of a slot's message: acked, or given up (the claim ends).
type outcome struct {
	slot  *slot
	acked bool
}

// claim is one partition's state in ConsumeClaim.
type claim struct {
	h        *windowHandler
	sess     sarama.ConsumerGroupSession
	inflight []*slot            // read and not marked, in offset order: handed out or waiting
	keys     map[string][]*slot // per key, its message handed out, then those waiting, in offset order
	out      int                // handed out, no outcome yet
	outcomes chan outcome
	draining chan struct{} // the claim is revoked: no more resends
	stop     chan struct{} // the claim has ended: the goroutines awaiting acks give up
}

// ConsumeClaim reads up to Window messages of the partition from the oldest one not
// acked, hands each out once no earlier message of its key is in flight, and marks the
// offset past the longest run of acked messages from the oldest.
func (h *windowHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, cl sarama.ConsumerGroupClaim) error {
	window := h.s.cfg.Window
	c := &claim{h: h, sess: sess, keys: map[string][]*slot{}, outcomes: make(chan outcome, window),
		draining: make(chan struct{}), stop: make(chan struct{})}
	defer close(c.stop)
	claimNo := h.s.claims.Add(1)
	if f := h.s.released; f != nil {
		defer f(cl.Partition(), claimNo)
	}
	in := cl.Messages()
	for {
		var read <-chan *sarama.ConsumerMessage
		if len(c.inflight) < window {
			read = in
		}
		var next *slot
		select {
		case m, ok := <-read:
			if !ok { // revoked, or the session ends
				c.drain()
				return nil
			}
			msg, err := h.s.cfg.Unmarshaler.Unmarshal(m)
			if err != nil {
				return fmt.Errorf("unmarshal message at offset %d of partition %d: %w", m.Offset, m.Partition, err)
			}
			sl := &slot{kafka: m, key: string(m.Key), msg: msg, ctx: withPosition(h.ctx, m.Partition, m.Offset, claimNo)}
			c.inflight = append(c.inflight, sl)
			c.keys[sl.key] = append(c.keys[sl.key], sl)
			if len(c.keys[sl.key]) == 1 {
				next = sl
			}
		case o := <-c.outcomes:
			next = c.settle(o)
		case <-sess.Context().Done():
			c.drain()
			return nil
		case <-h.ctx.Done():
			return nil
		}
		if next == nil {
			continue
		}
		// Handed out here, in offset order per key; a goroutine awaits the ack.
		next.msg.SetContext(next.ctx)
		select {
		case h.output <- next.msg:
		case <-sess.Context().Done():
			c.drain()
			return nil
		case <-h.ctx.Done():
			return nil
		}
		c.out++
		h.messages.Go(func() { h.await(next.ctx, next.msg, next, c.outcomes, c.draining, c.stop) })
	}
}

// settle records an outcome, marks the offset past the acked messages at the front, and
// returns its key's next message, now free to go (nil when none waits).
func (c *claim) settle(o outcome) *slot {
	o.slot.acked = o.acked
	c.out--
	var next *slot
	if q := c.keys[o.slot.key][1:]; len(q) == 0 {
		delete(c.keys, o.slot.key)
	} else {
		c.keys[o.slot.key] = q
		next = q[0]
	}
	n := 0
	for n < len(c.inflight) && c.inflight[n].acked {
		n++
	}
	if n > 0 {
		c.sess.MarkMessage(c.inflight[n-1].kafka, "")
		c.inflight = c.inflight[n:]
	}
	return next
}

// drain hands nothing more out and waits, up to DrainTimeout, for an outcome of every
// message handed out, marking what they ack (a message given up stops the mark at its
// offset).
func (c *claim) drain() {
	c.h.s.drains.Add(1)
	close(c.draining)
	timeout := time.NewTimer(c.h.s.cfg.DrainTimeout)
	defer timeout.Stop()
	for c.out > 0 {
		select {
		case o := <-c.outcomes:
			c.settle(o)
		case <-timeout.C:
			return
		case <-c.h.ctx.Done():
			return
		}
	}
}

// await reports the ack of a message handed out with ctx; a Nack hands it out again after
// NackResendSleep. Once the claim drains, a message nacked is given up (reported unacked);
// once the claim has ended, or the subscriber closes, await just stops.
func (h *windowHandler) await(ctx context.Context, msg *message.Message, sl *slot, outcomes chan<- outcome, draining, stop <-chan struct{}) {
	// outcomes has room for every message in flight, and each reports once.
	report := func(acked bool) { outcomes <- outcome{slot: sl, acked: acked} }
	for {
		select {
		case <-msg.Acked():
			report(true)
			return
		case <-msg.Nacked():
		case <-stop:
			return
		case <-h.ctx.Done():
			return
		}
		msg = msg.Copy() // a fresh ack and nack
		msg.SetContext(ctx)
		select {
		case <-time.After(h.s.cfg.NackResendSleep):
		case <-draining:
			report(false)
			return
		case <-stop:
			return
		case <-h.ctx.Done():
			return
		}
		select {
		case h.output <- msg:
		case <-draining:
			report(false)
			return
		case <-stop:
			return
		case <-h.ctx.Done():
			return
		}
	}
}

type positionKey struct{}

type position struct {
	partition int32
	offset    int64
	claim     int64
}

func withPosition(ctx context.Context, partition int32, offset, claim int64) context.Context {
	return context.WithValue(ctx, positionKey{}, position{partition, offset, claim})
}

// MessagePosition returns the partition and offset a WindowSubscriber handed a message
// out from (in the message's context).
func MessagePosition(ctx context.Context) (partition int32, offset int64, ok bool) {
	p, ok := ctx.Value(positionKey{}).(position)
	return p.partition, p.offset, ok
}

// MessageClaim returns the number of the claim of its partition a WindowSubscriber handed
// a message out under (rising in the process: each claim, a partition assigned, has its
// own), 0 when there is none.
func MessageClaim(ctx context.Context) int64 {
	p, _ := ctx.Value(positionKey{}).(position)
	return p.claim
}
