package http

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestBacklogSpacesSlowCounts: Full follows the last count against max, and after a count
// that took long the next one waits countSpacing times as long, not just the interval.
func TestBacklogSpacesSlowCounts(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	counts := []struct {
		n    int64
		took time.Duration
	}{{5, time.Millisecond}, {11, 100 * time.Millisecond}, {3, 0}}
	waits := make(chan time.Duration)
	tick := make(chan time.Time)
	i := 0
	b := NewBacklog(func(ctx context.Context, upTo int64) (int64, error) {
		if upTo != 10 {
			t.Errorf("counted up to %d, want max 10", upTo)
		}
		c := counts[i]
		i++
		clock = clock.Add(c.took)
		return c.n, nil
	}, 10, time.Second, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	b.now = func() time.Time { return clock }
	b.after = func(d time.Duration) <-chan time.Time { waits <- d; return tick }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- b.Run(ctx) }()

	for _, want := range []struct {
		wait time.Duration
		full bool
	}{{time.Second, false}, {5 * time.Second, true}, {time.Second, false}} {
		if got := <-waits; got != want.wait {
			t.Errorf("waited %s after a count, want %s", got, want.wait)
		}
		if b.Full() != want.full {
			t.Errorf("Full() = %v with %d counted, want %v", b.Full(), b.n.Load(), want.full)
		}
		if i < len(counts) {
			tick <- clock
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
