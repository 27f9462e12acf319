package router

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
)

// countingClient answers the lag's reads of two partitions and counts them.
type countingClient struct {
	sarama.Client
	reads int
}

func (c *countingClient) Partitions(string) ([]int32, error) { c.reads++; return []int32{0, 1}, nil }
func (c *countingClient) GetOffset(string, int32, int64) (int64, error) {
	return 10, nil
}

type committedAdmin struct{ sarama.ClusterAdmin }

func (committedAdmin) ListConsumerGroupOffsets(string, map[string][]int32) (*sarama.OffsetFetchResponse, error) {
	r := &sarama.OffsetFetchResponse{}
	r.AddBlock("t", 0, &sarama.OffsetFetchResponseBlock{Offset: 4})
	return r, nil
}

// TestLagReadingServesScrapesForASecond: /metrics asks no credentials and every reading of
// the consumer lag costs the broker a request per partition and more, so anyone could keep
// the broker busy with scrapes (found by a review). A reading now serves the scrapes of
// the next second.
func TestLagReadingServesScrapesForASecond(t *testing.T) {
	t.Parallel()
	client := &countingClient{}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &consumerLag{client: client, admin: committedAdmin{}, group: "g", topic: "t", now: func() time.Time { return now },
		desc: prometheus.NewDesc("lag", "", []string{"group", "topic", "partition"}, nil)}
	scrape := func() int {
		ch := make(chan prometheus.Metric, 10)
		c.Collect(ch)
		close(ch)
		n := 0
		for range ch {
			n++
		}
		return n
	}
	for i := range 50 {
		if n := scrape(); n != 2 {
			t.Fatalf("scrape %d: %d series, want one per partition", i, n)
		}
		now = now.Add(10 * time.Millisecond)
	}
	if client.reads != 1 {
		t.Errorf("50 scrapes in half a second read the lag %d times, want once", client.reads)
	}
	now = now.Add(time.Second)
	scrape()
	if client.reads != 2 {
		t.Errorf("a scrape a second later read the lag %d times in all, want a fresh reading", client.reads)
	}
}

// slowClient is a broker whose reading of the lag takes the clock 2 s.
type slowClient struct {
	countingClient
	clock *time.Time
}

func (c *slowClient) Partitions(topic string) ([]int32, error) {
	*c.clock = c.clock.Add(2 * time.Second)
	return c.countingClient.Partitions(topic)
}

// TestSlowLagReadingStillServesASecond: a reading's second counts from when it ended; from
// its start, a broker slow to answer (when the lag matters most) had every queued scrape
// read again, back to back (found by a review).
func TestSlowLagReadingStillServesASecond(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	client := &slowClient{clock: &now}
	c := &consumerLag{client: client, admin: committedAdmin{}, group: "g", topic: "t", now: func() time.Time { return now },
		desc: prometheus.NewDesc("lag", "", []string{"group", "topic", "partition"}, nil)}
	for range 3 {
		ch := make(chan prometheus.Metric, 10)
		c.Collect(ch)
	}
	if client.reads != 1 {
		t.Errorf("3 scrapes right after a 2 s reading read the lag %d times, want once", client.reads)
	}
}
