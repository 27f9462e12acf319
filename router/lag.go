package router

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
)

// consumerLag reports, at scrape time, how far a consumer group is behind on each
// partition of a topic (newest offset minus committed offset). A reading serves the
// scrapes of the next lagFresh: /metrics asks no credentials, and each reading costs the
// broker a request per partition and more, so a flood of scrapes costs it at most one
// reading a second.
type consumerLag struct {
	client sarama.Client
	admin  sarama.ClusterAdmin
	group  string
	topic  string
	desc   *prometheus.Desc
	now    func() time.Time

	mu   sync.Mutex
	at   time.Time
	last []prometheus.Metric
}

// lagFresh is how long one reading of the lag serves scrapes.
const lagFresh = time.Second

// NewConsumerLagCollector returns a collector of leaderboard_kafka_consumer_lag; Close
// its client with the returned func.
func NewConsumerLagCollector(brokers []string, group, topic string) (prometheus.Collector, func() error, error) {
	cfg := sarama.NewConfig()
	cfg.Version = KafkaVersion
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka lag client: %w", err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("kafka lag admin: %w", err)
	}
	c := &consumerLag{client: client, admin: admin, group: group, topic: topic, now: time.Now,
		desc: prometheus.NewDesc("leaderboard_kafka_consumer_lag", "Messages of the topic the consumer group has not committed yet, per partition.",
			[]string{"group", "topic", "partition"}, nil)}
	return c, admin.Close, nil
}

func (c *consumerLag) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *consumerLag) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); c.last == nil || now.Sub(c.at) >= lagFresh || now.Before(c.at) {
		// Fresh from when the reading ended: a slow broker's readings do not run back to
		// back for the scrapes that queued meanwhile.
		c.last = c.read()
		c.at = c.now()
	}
	for _, m := range c.last {
		ch <- m
	}
}

// read reads the lag of every partition (an error as one invalid metric).
func (c *consumerLag) read() []prometheus.Metric {
	partitions, err := c.client.Partitions(c.topic)
	if err != nil {
		return []prometheus.Metric{prometheus.NewInvalidMetric(c.desc, err)}
	}
	committed, err := c.admin.ListConsumerGroupOffsets(c.group, map[string][]int32{c.topic: partitions})
	if err != nil {
		return []prometheus.Metric{prometheus.NewInvalidMetric(c.desc, err)}
	}
	out := make([]prometheus.Metric, 0, len(partitions))
	for _, p := range partitions {
		newest, err := c.client.GetOffset(c.topic, p, sarama.OffsetNewest)
		if err != nil {
			continue
		}
		lag := newest
		if b := committed.GetBlock(c.topic, p); b != nil && b.Offset >= 0 {
			lag = newest - b.Offset
		}
		out = append(out, prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(max(lag, 0)), c.group, c.topic, strconv.Itoa(int(p))))
	}
	return out
}
