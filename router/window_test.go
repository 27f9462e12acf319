package router

import (
	"context"
	"fmt"
	"github.com/IBM/sarama"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// startBroker starts an embedded broker, closed when the test ends.
func startBroker(t *testing.T) *EmbeddedKafka {
	t.Helper()
	broker, err := StartEmbeddedKafka("", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	return broker
}

// windowEnv is a broker with a one-partition score topic holding n messages, keyed by
// keys[i % len(keys)], payload "i".
func windowEnv(t *testing.T, n int, keys ...string) (*EmbeddedKafka, Topics) {
	t.Helper()
	broker := startBroker(t)
	topics := NewTopics("window-test", 1)
	if err := EnsureTopics(context.Background(), broker.Addrs(), topics); err != nil {
		t.Fatal(err)
	}
	pub, err := NewKafkaPublisher(broker.Addrs(), NewLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for i := range n {
		msg := message.NewMessage(fmt.Sprintf("m-%d", i), []byte(fmt.Sprint(i)))
		msg.Metadata.Set("partition_key", keys[i%len(keys)])
		if err := pub.Publish(topics.Scores, msg); err != nil {
			t.Fatal(err)
		}
	}
	return broker, topics
}

// subscribe joins group with the given window; the subscriber closes at cleanup.
func subscribe(t *testing.T, broker *EmbeddedKafka, topics Topics, group string, window int) (*WindowSubscriber, <-chan *message.Message) {
	t.Helper()
	sub, err := NewKafkaSubscriber(broker.Addrs(), group, window, NewLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	out, err := sub.Subscribe(context.Background(), topics.Scores)
	if err != nil {
		t.Fatal(err)
	}
	return sub, out
}

// receive waits for the next message handed out.
func receive(t *testing.T, out <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m := <-out:
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message handed out within 30 s")
		return nil
	}
}

// none asserts that nothing is handed out for a while.
func none(t *testing.T, out <-chan *message.Message, why string) {
	t.Helper()
	select {
	case m := <-out:
		t.Fatalf("%s, but message %s was handed out", why, m.Payload)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestWindowSubscriberKeepsTheWindowAndKeyOrder: a partition hands out up to Window
// messages from its oldest one not acked, never two of one key at once, and each key's
// messages in the order they were published; acks in any order let the rest through.
func TestWindowSubscriberKeepsTheWindowAndKeyOrder(t *testing.T) {
	t.Parallel()
	// keys a b c d a b c d ...: with a window of 3, messages 0-2 (a, b, c) go out; acks of
	// 1 and 2 free no place while 0 is not acked; then 3 (d) and 4 (a) go.
	broker, topics := windowEnv(t, 40, "a", "b", "c", "d")
	_, out := subscribe(t, broker, topics, "window-order", 3)

	held := []*message.Message{receive(t, out), receive(t, out), receive(t, out)}
	none(t, out, "3 messages are in flight with a window of 3")
	for i, m := range held {
		if string(m.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d handed out is %s, want %d", i, m.Payload, i)
		}
	}
	held[1].Ack()
	held[2].Ack()
	none(t, out, "message 0 is not acked, and the window reaches only to message 2")
	held[0].Ack()
	for _, want := range []string{"3", "4"} {
		m := receive(t, out)
		if string(m.Payload) != want {
			t.Fatalf("after message 0's ack, %s was handed out, want %s", m.Payload, want)
		}
		held = append(held, m)
	}
	held[4].Ack()
	held[3].Ack()

	// The rest, acked as they come, in reverse order within each window's worth.
	last := map[string]int{"a": 4, "b": 1, "c": 2, "d": 3}
	seen := 5
	for seen < 40 {
		var batch []*message.Message
		batch = append(batch, receive(t, out))
		for len(batch) < 3 {
			select {
			case m := <-out:
				batch = append(batch, m)
				continue
			case <-time.After(100 * time.Millisecond):
			}
			break
		}
		keys := map[string]bool{}
		for _, m := range batch {
			var i int
			_, _ = fmt.Sscan(string(m.Payload), &i)
			key := m.Metadata.Get("partition_key")
			if keys[key] {
				t.Fatalf("two messages of key %s in flight at once", key)
			}
			keys[key] = true
			if i <= last[key] {
				t.Fatalf("key %s: message %d after %d", key, i, last[key])
			}
			last[key] = i
			seen++
		}
		for j := len(batch) - 1; j >= 0; j-- {
			batch[j].Ack()
		}
	}
	none(t, out, "all 40 messages were handed out once")
}

// TestWindowSubscriberMarksOnlyPastAckedMessages: acks of later messages do not move the
// group's offset past an earlier message that is not acked, so the next consumer starts
// at it; once everything is acked, the next consumer gets nothing old.
func TestWindowSubscriberMarksOnlyPastAckedMessages(t *testing.T) {
	t.Parallel()
	broker, topics := windowEnv(t, 4, "a", "b", "c", "d")
	sub, out := subscribe(t, broker, topics, "window-marks", 4)
	held := []*message.Message{receive(t, out), receive(t, out), receive(t, out), receive(t, out)}
	held[1].Ack()
	held[2].Ack()
	held[3].Ack()
	time.Sleep(time.Second) // two auto-commit intervals
	_ = sub.Close()

	sub, out = subscribe(t, broker, topics, "window-marks", 4)
	for i := range 4 {
		m := receive(t, out)
		if string(m.Payload) != fmt.Sprint(i) {
			t.Fatalf("redelivered %s, want %d: the offset moved past the unacked message 0", m.Payload, i)
		}
		m.Ack()
	}
	time.Sleep(time.Second)
	_ = sub.Close()

	_, out = subscribe(t, broker, topics, "window-marks", 4)
	none(t, out, "every message was acked")
}

// TestWindowSubscriberMarksNotPastAWaitingMessage: a message read but waiting for its
// user's earlier one stops the group's offset like a message in flight: with a a b, acks
// of the first a and of b leave the second a (handed out once the first is acked, never
// acked) to come back to the next consumer first, and b after it.
func TestWindowSubscriberMarksNotPastAWaitingMessage(t *testing.T) {
	t.Parallel()
	broker, topics := windowEnv(t, 3, "a", "a", "b")
	sub, out := subscribe(t, broker, topics, "window-waiting", 3)
	first, third := receive(t, out), receive(t, out)
	if string(first.Payload) != "0" || string(third.Payload) != "2" {
		t.Fatalf("handed out %s and %s, want 0 and 2 (1 waits for 0: both are a's)", first.Payload, third.Payload)
	}
	third.Ack()
	none(t, out, "1 waits for 0, its user's earlier message")
	first.Ack()
	if second := receive(t, out); string(second.Payload) != "1" {
		t.Fatalf("after 0's ack, %s was handed out, want 1", second.Payload)
	} // and never acked
	time.Sleep(time.Second) // two auto-commit intervals
	_ = sub.Close()

	_, out = subscribe(t, broker, topics, "window-waiting", 3)
	if m := receive(t, out); string(m.Payload) != "1" {
		t.Fatalf("the next consumer got %s first, want 1: the offset moved past a message not acked", m.Payload)
	}
	if m := receive(t, out); string(m.Payload) != "2" { // acked, but behind 1: at least once
		t.Fatalf("the next consumer got %s second, want 2 again", m.Payload)
	}
	none(t, out, "the offset stood at 1")
}

// TestWindowSubscriberResendsANackedMessageHoldingItsKey: a nacked message comes back
// (the same UUID), and its key's later messages wait until it is acked, while other keys'
// messages pass them.
func TestWindowSubscriberResendsANackedMessageHoldingItsKey(t *testing.T) {
	t.Parallel()
	broker, topics := windowEnv(t, 4, "a", "a", "b", "a")
	_, out := subscribe(t, broker, topics, "window-nack", 4)
	first := receive(t, out)
	if string(first.Payload) != "0" {
		t.Fatalf("first message %s, want 0", first.Payload)
	}
	if m := receive(t, out); string(m.Payload) != "2" {
		t.Fatalf("handed out %s while message 0 (key a) is in flight, want 2 (key b)", m.Payload)
	} else {
		m.Ack()
	}
	none(t, out, "messages 1 and 3 have key a, and message 0 (key a) is in flight")
	first.Nack()
	again := receive(t, out)
	if again.UUID != first.UUID {
		t.Fatalf("after a nack, %s was handed out, want message 0 again", again.Payload)
	}
	none(t, out, "message 0 (key a) is in flight again")
	again.Ack()
	second := receive(t, out)
	if string(second.Payload) != "1" {
		t.Fatalf("after message 0's ack, %s was handed out, want 1", second.Payload)
	}
	none(t, out, "message 3 has key a, and message 1 (key a) is in flight")
	second.Ack()
	if m := receive(t, out); string(m.Payload) != "3" {
		t.Fatalf("handed out %s, want 3", m.Payload)
	}
}

// TestWindowSubscriberDrainsARevokedPartition: when a second consumer joins, the first
// one's partitions are revoked while it holds messages; it waits for them, and the acks
// that come meanwhile are committed, so neither consumer gets those messages again.
func TestWindowSubscriberDrainsARevokedPartition(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topics := NewTopics("drain-test", 2)
	if err := EnsureTopics(context.Background(), broker.Addrs(), topics); err != nil {
		t.Fatal(err)
	}
	pub, err := NewKafkaPublisher(broker.Addrs(), NewLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	publish := func(prefix string) {
		for i := range 6 {
			msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("%s-%d", prefix, i)))
			msg.Metadata.Set("partition_key", fmt.Sprintf("k%d", i))
			if err := pub.Publish(topics.Scores, msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("old")
	a, outA := subscribe(t, broker, topics, "drain-group", 8)
	var held []*message.Message
	for range 6 {
		held = append(held, receive(t, outA))
	}
	_, outB := subscribe(t, broker, topics, "drain-group", 8)
	deadline := time.Now().Add(30 * time.Second)
	for a.drains.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first consumer's partitions were not revoked within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, m := range held { // acked while the revoked partitions drain
		m.Ack()
	}
	publish("new")
	got := map[string]bool{}
	for len(got) < 6 {
		var m *message.Message
		select {
		case m = <-outA:
		case m = <-outB:
		case <-time.After(30 * time.Second):
			t.Fatalf("got %v of the 6 new messages within 30 s", got)
		}
		if p := string(m.Payload); p[:4] != "new-" {
			t.Fatalf("%s was handed out again after it was acked while its partition drained", p)
		} else {
			got[p] = true
		}
		m.Ack()
	}
}

// TestNotificationsTopicIsKeptADay: the notifications topic is compacted and its records
// deleted after a day (read from the newest offset only, it would otherwise keep the last
// top of every day and every match forever).
func TestNotificationsTopicIsKeptADay(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topics := NewTopics("notif-retention", 2)
	if err := EnsureTopics(context.Background(), broker.Addrs(), topics); err != nil {
		t.Fatal(err)
	}
	admin := newAdmin(t, broker)
	got := topicConfig(t, admin, topics.Notifications)
	if got["cleanup.policy"] != "compact,delete" || got["retention.ms"] != "86400000" {
		t.Errorf("notifications topic: cleanup.policy %q, retention.ms %q; want compact,delete and a day", got["cleanup.policy"], got["retention.ms"])
	}
}

// newAdmin is a Kafka admin client of broker, closed when the test ends.
func newAdmin(t *testing.T, broker *EmbeddedKafka) sarama.ClusterAdmin {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = KafkaVersion
	admin, err := sarama.NewClusterAdmin(broker.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	return admin
}

// topicConfig is a topic's configuration, by name.
func topicConfig(t *testing.T, admin sarama.ClusterAdmin, topic string) map[string]string {
	t.Helper()
	results, err := admin.DescribeConfigs([]*sarama.ConfigResource{{Type: sarama.TopicResource, Name: topic}}, sarama.DescribeConfigsOptions{})
	if err != nil || len(results) != 1 || results[0].ErrorCode != sarama.ErrNoError {
		t.Fatalf("describe topic %s: %v %+v", topic, err, results)
	}
	got := map[string]string{}
	for _, e := range results[0].Configs {
		got[e.Name] = e.Value
	}
	return got
}
