package router

import (
	"context"
	"testing"

	"github.com/IBM/sarama"
)

// TestNotificationsTopicOfAnEarlierVersionIsKeptADay: a deployment that ran an
// earlier version has the notifications topic compacted only (what EnsureTopics, and
// compose's kafka-init, created then); the fix's day of retention must reach it too, or
// it keeps the last top of every day and every match forever, as before. (EnsureTopics
// only created missing topics. Found by a review.)
func TestNotificationsTopicOfAnEarlierVersionIsKeptADay(t *testing.T) {
	t.Parallel()
	broker := startBroker(t)
	topics := NewTopics("notif-upgrade", 2)
	admin := newAdmin(t, broker)
	compact := "compact"
	if err := admin.CreateTopic(topics.Notifications, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: -1,
		ConfigEntries: map[string]*string{"cleanup.policy": &compact}}, false); err != nil {
		t.Fatal(err)
	}
	if err := EnsureTopics(context.Background(), broker.Addrs(), topics); err != nil {
		t.Fatal(err)
	}
	got := topicConfig(t, admin, topics.Notifications)
	if got["cleanup.policy"] != "compact,delete" || got["retention.ms"] != "86400000" {
		t.Errorf("notifications topic after an upgrade: cleanup.policy %q, retention.ms %q; want compact,delete and a day", got["cleanup.policy"], got["retention.ms"])
	}
}
