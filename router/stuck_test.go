package router

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestStuckPartitions drives the tracker with an injected clock: a partition is stuck from
// the start of the first failing attempt on a message, stays stuck across redeliveries,
// counts from its oldest failing message while several fail, and clears when a delivery succeeds (applied
// or dead-lettered).
func TestStuckPartitions(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewStuckPartitions(func() time.Time { return now })
	type pos struct {
		partition int32
		offset    int64
	}
	s.position = func(m *message.Message) (int32, int64, bool) {
		p := m.Context().Value(posKey{}).(pos)
		return p.partition, p.offset, true
	}
	deliver := func(p pos, took time.Duration, fail bool) {
		msg := message.NewMessage("m", nil)
		msg.SetContext(contextWith(p))
		_, _ = s.Middleware(func(*message.Message) ([]*message.Message, error) {
			now = now.Add(took) // the attempt takes this long (Retry's backoff inside)
			if fail {
				return nil, errors.New("redis down")
			}
			return nil, nil
		})(msg)
	}
	series := func(partition string) float64 {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(s)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == partition {
					return m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}

	deliver(pos{3, 10}, time.Second, false)
	if s.Longest() != 0 || testutil.CollectAndCount(s) != 0 {
		t.Fatalf("a healthy delivery left the partition stuck: %v", s.Longest())
	}
	deliver(pos{3, 11}, 10*time.Second, true) // the first attempt on offset 11 fails after 10 s
	if got := s.Longest(); got != 10*time.Second {
		t.Fatalf("stuck for %v after one failed attempt of 10 s, want 10s", got)
	}
	now = now.Add(5 * time.Second) // Nack, resend
	deliver(pos{3, 11}, 10*time.Second, true)
	if got := s.Longest(); got != 25*time.Second {
		t.Fatalf("stuck for %v after a redelivery, want 25s (counted from the first attempt)", got)
	}
	deliver(pos{5, 7}, time.Second, true)
	if got := series("3"); got != 26 {
		t.Fatalf("partition 3 series = %v, want 26", got)
	}
	if got := series("5"); got != 1 {
		t.Fatalf("partition 5 series = %v, want 1", got)
	}
	deliver(pos{3, 11}, time.Second, false) // applied at last
	if got := series("3"); got != 0 {
		t.Fatalf("partition 3 series = %v after it applied, want 0", got)
	}
	if got := s.Longest(); got != 2*time.Second {
		t.Fatalf("Longest = %v, want partition 5's 2s", got)
	}
	// With several messages of a partition in flight, a later one can fail too: the
	// partition is as stuck as its oldest failing message, until that one succeeds.
	deliver(pos{5, 8}, 3*time.Second, true)
	if got := s.Longest(); got != 5*time.Second {
		t.Fatalf("Longest = %v after a second failing offset, want the first one's 5s", got)
	}
	deliver(pos{5, 7}, time.Second, false)
	if got := s.Longest(); got != 4*time.Second {
		t.Fatalf("Longest = %v once offset 7 applied, want offset 8's 4s", got)
	}
	deliver(pos{5, 8}, time.Second, false)
	if got := s.Longest(); got != 0 || series("5") != 0 {
		t.Fatalf("Longest = %v, partition 5 = %v once both applied, want 0", got, series("5"))
	}
}

type posKey struct{}

func contextWith(v any) context.Context { return context.WithValue(context.Background(), posKey{}, v) }

// TestStuckPartitionsRelease: a released claim's failures are forgotten, and so are those
// of its messages that finish after it ended (they were in flight); a later claim of the
// same partition counts again.
func TestStuckPartitionsRelease(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewStuckPartitions(func() time.Time { return now })
	s.position = func(m *message.Message) (int32, int64, bool) { return 3, 7, true }
	claim := int64(1)
	s.claim = func(*message.Message) int64 { return claim }
	fail := func() {
		_, _ = s.Middleware(func(*message.Message) ([]*message.Message, error) {
			now = now.Add(time.Second)
			return nil, errors.New("postgres down")
		})(message.NewMessage("m", nil))
	}
	fail()
	if s.Longest() == 0 {
		t.Fatal("a failing delivery left nothing stuck")
	}
	s.Release(3, 1)
	if l := s.Longest(); l != 0 {
		t.Fatalf("after its claim was released: stuck for %v", l)
	}
	fail() // a message of claim 1 still in flight when the claim ended
	if l := s.Longest(); l != 0 {
		t.Fatalf("a late failure of a released claim: stuck for %v", l)
	}
	claim = 2 // the partition assigned here again
	fail()
	if s.Longest() == 0 {
		t.Fatal("a failure under a new claim of the partition is not counted")
	}
}

// TestStuckPartitionReassignedHereKeepsItsAge: a partition stuck on one message,
// whose claim ends at a rebalance that gives it back to this same replica (an eager
// rebalance ends every claim, also of partitions that stay), is still stuck on that message
// since its first failing attempt: 3 minutes, past the default
// LEADERBOARD_PROJECTOR_STUCK_AFTER of 1m. (A first version of Release forgot the age, so
// a replica whose group rebalanced more often than STUCK_AFTER never reported the
// partition. Found by a review.)
func TestStuckPartitionReassignedHereKeepsItsAge(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewStuckPartitions(func() time.Time { return now })
	s.position = func(*message.Message) (int32, int64, bool) { return 3, 7, true } // the same message every time
	claim := int64(1)
	s.claim = func(*message.Message) int64 { return claim }
	fail := func() {
		_, _ = s.Middleware(func(*message.Message) ([]*message.Message, error) {
			now = now.Add(time.Second)
			return nil, errors.New("postgres down")
		})(message.NewMessage("m", nil))
	}
	fail()                         // t=0..1s: offset 7 starts failing under claim 1
	now = now.Add(3 * time.Minute) // retries keep failing
	s.Release(3, 1)                // a rebalance ends claim 1 ...
	claim = 2                      // ... and assigns partition 3 here again
	fail()                         // offset 7, redelivered, still fails
	if got := s.Longest(); got < 3*time.Minute {
		t.Fatalf("partition 3 failing on offset 7 for 3m on this replica (its claim renewed by a rebalance): stuck for %v, want at least 3m", got)
	}
}
