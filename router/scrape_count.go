package router

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// ScrapeCount serves a count PostgreSQL takes to /metrics off the scrape's path: a scrape
// (anonymous, on the API's address) answers the last count ended and starts another when
// the last one started more than every ago, one at a time, so that scrapers never hold
// the pool's connections (with a table slow or locked, a count per scrape held one each,
// and players' writes waited behind them). So a scrape answers the count an earlier
// scrape started. -1 until the first count ends, and after a failed one.
type ScrapeCount struct {
	count          func(context.Context) (int64, error)
	every, timeout time.Duration
	value          atomic.Int64

	mu      sync.Mutex
	started time.Time // of the last count (monotonic: a clock stepped back stops nothing)
	busy    bool
}

// NewScrapeCount returns a count taken at most every every, each within timeout.
func NewScrapeCount(every, timeout time.Duration, count func(context.Context) (int64, error)) *ScrapeCount {
	c := &ScrapeCount{count: count, every: every, timeout: timeout}
	c.value.Store(-1)
	return c
}

// Get answers the last count, starting another when it is due.
func (c *ScrapeCount) Get() float64 {
	c.mu.Lock()
	if !c.busy && (c.started.IsZero() || time.Since(c.started) > c.every) {
		c.busy, c.started = true, time.Now()
		go c.take()
	}
	c.mu.Unlock()
	return float64(c.value.Load())
}

func (c *ScrapeCount) take() {
	defer func() {
		c.mu.Lock()
		c.busy = false
		c.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	n, err := c.count(ctx)
	if err != nil {
		n = -1
	}
	c.value.Store(n)
}
