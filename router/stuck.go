package router

import (
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
)

// StuckPartitions tracks, per Kafka partition, the messages the projector keeps failing on
// with transient errors (a Nack redelivers the same offset, and the partition's offset
// cannot move past it). A message that is applied or dead-lettered is cleared.
type StuckPartitions struct {
	now      func() time.Time
	position func(*message.Message) (partition int32, offset int64, ok bool)
	claim    func(*message.Message) int64
	desc     *prometheus.Desc

	mu       sync.Mutex
	stuck    map[int32]map[int64]stuckSince // per partition, failing offsets
	seen     map[int32]bool                 // partitions that were ever stuck (their series stays, at 0)
	released map[int32]int64                // per partition, the newest claim that ended here
}

// stuckSince is a failing message: when its first failing attempt started, the claim it
// was handed out under, and whether that claim ended (released: not counted, unless the
// partition comes back here and the message fails again, which keeps its age).
type stuckSince struct {
	at       time.Time
	claim    int64
	released bool
}

// NewStuckPartitions returns a tracker reading time from now (time.Now in production).
func NewStuckPartitions(now func() time.Time) *StuckPartitions {
	return &StuckPartitions{
		now: now, position: kafkaPosition, claim: func(m *message.Message) int64 { return MessageClaim(m.Context()) },
		stuck: map[int32]map[int64]stuckSince{}, seen: map[int32]bool{}, released: map[int32]int64{},
		desc: prometheus.NewDesc("leaderboard_projector_stuck_seconds",
			"Age of the oldest message a partition keeps failing on with transient errors (0: not stuck).",
			[]string{"partition"}, nil),
	}
}

// Middleware records the outcome of every delivery: an error leaves the message's
// partition stuck (since the attempt began), success or a dead letter clears it. It goes
// outermost, so it sees what the subscriber sees.
func (s *StuckPartitions) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		start := s.now()
		out, err := h(msg)
		partition, offset, ok := s.position(msg)
		if !ok {
			return out, err
		}
		claim := s.claim(msg)
		s.mu.Lock()
		defer s.mu.Unlock()
		if claim != 0 && claim <= s.released[partition] {
			return out, err // its partition went elsewhere: this process no longer waits on it
		}
		failing := s.stuck[partition]
		if err == nil {
			delete(failing, offset)
			if len(failing) == 0 {
				delete(s.stuck, partition)
			}
			return out, err
		}
		if failing == nil {
			failing = map[int64]stuckSince{}
			s.stuck[partition] = failing
			s.seen[partition] = true
		}
		f, ok := failing[offset]
		if !ok {
			f.at = start
		}
		// Failing again under a later claim (an eager rebalance ends every claim, the ones
		// it gives back here too), the message keeps the age of its first failure.
		f.claim, f.released = claim, false
		failing[offset] = f
		return out, err
	}
}

// Release stops counting what a claim of the partition that ended left stuck (a rebalance
// moved the partition, perhaps to another replica, which reports it if it stays stuck),
// and ignores the outcomes of its messages still in flight. If the partition comes back
// here and a message fails again, it counts from its first failure. (A replica that kept
// a partition it no longer owned stuck never cleared it: it never saw those offsets
// again, and /readyz stayed 503.)
func (s *StuckPartitions) Release(partition int32, claim int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released[partition] = max(s.released[partition], claim)
	for offset, f := range s.stuck[partition] {
		if f.claim <= claim {
			f.released = true
			s.stuck[partition][offset] = f
		}
	}
}

// kafkaPosition reads where a message sits, as the WindowSubscriber records it.
func kafkaPosition(msg *message.Message) (int32, int64, bool) {
	return MessagePosition(msg.Context())
}

// Longest returns how long the most stuck partition has waited (0 when none is stuck).
func (s *StuckPartitions) Longest() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var longest time.Duration
	now := s.now()
	for _, failing := range s.stuck {
		for _, f := range failing {
			if !f.released {
				longest = max(longest, now.Sub(f.at))
			}
		}
	}
	return longest
}

// Describe implements prometheus.Collector.
func (s *StuckPartitions) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector.
func (s *StuckPartitions) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for p := range s.seen {
		age := 0.0
		for _, f := range s.stuck[p] {
			if !f.released {
				age = max(age, now.Sub(f.at).Seconds())
			}
		}
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, age, strconv.Itoa(int(p)))
	}
}
