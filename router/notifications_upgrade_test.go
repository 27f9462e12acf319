package router

import (
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
	broker, err := StartEmbeddedKafka("", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	topics := NewTopics("notif-upgrade", 2)
	cfg := sarama.NewConfig()
	cfg.Version = KafkaVersion
	admin, err := sarama.NewClusterAdmin(broker.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	compact := "compact"
	if err := admin.CreateTopic(topics.Notifications, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: -1,
		ConfigEntries: map[string]*string{"cleanup.policy": &compact}}, false); err != nil {
		t.Fatal(err)
	}
	if err := EnsureTopics(broker.Addrs(), topics); err != nil {
		t.Fatal(err)
	}
	results, err := admin.DescribeConfigs([]*sarama.ConfigResource{{Type: sarama.TopicResource, Name: topics.Notifications}}, sarama.DescribeConfigsOptions{})
	if err != nil || len(results) != 1 || results[0].ErrorCode != sarama.ErrNoError {
		t.Fatalf("describe the notifications topic: %v %+v", err, results)
	}
	got := map[string]string{}
	for _, e := range results[0].Configs {
		got[e.Name] = e.Value
	}
	if got["cleanup.policy"] != "compact,delete" || got["retention.ms"] != "86400000" {
		t.Errorf("notifications topic after an upgrade: cleanup.policy %q, retention.ms %q; want compact,delete and a day", got["cleanup.policy"], got["retention.ms"])
	}
}
