package router

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestScrapeCountTakesOneCountAtATime: scrapes answer the last count ended and start at
// most one count at a time, and none while the last started within its interval.
func TestScrapeCountTakesOneCountAtATime(t *testing.T) {
	t.Parallel()
	var running, most, counts atomic.Int32
	release := make(chan struct{})
	c := NewScrapeCount(time.Hour, time.Minute, func(context.Context) (int64, error) {
		counts.Add(1)
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		return 42, nil
	})
	for range 20 {
		if v := c.Get(); v != -1 {
			t.Fatalf("a scrape before the first count ended: %v, want -1", v)
		}
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for c.Get() != 42 {
		if time.Now().After(deadline) {
			t.Fatal("the count's value never served")
		}
		time.Sleep(time.Millisecond)
	}
	if counts.Load() != 1 || most.Load() != 1 {
		t.Errorf("%d counts, %d at once, within the interval: want one", counts.Load(), most.Load())
	}
}
