package router

import (
	"context"
	"sync/atomic"
	"time"
)

// ScrapeCount serves a count PostgreSQL takes to /metrics off the scrape's path: a scrape
// (anonymous, on the API's address) answers the last count and starts another when it is
// older than every, one at a time, so that scrapers never hold the pool's connections
// (with a table slow or locked, a count per scrape held one each, and players' writes
// waited behind them). -1 until the first count ends, and after a failed one.
type ScrapeCount struct {
	count          func(context.Context) (int64, error)
	every, timeout time.Duration
	value          atomic.Int64
	started        atomic.Int64 // unix ns of the last count started
	busy           atomic.Bool
}

// NewScrapeCount returns a count taken at most every every, each within timeout.
func NewScrapeCount(every, timeout time.Duration, count func(context.Context) (int64, error)) *ScrapeCount {
	c := &ScrapeCount{count: count, every: every, timeout: timeout}
	c.value.Store(-1)
	return c
}

// Get answers the last count, starting another when it is due.
func (c *ScrapeCount) Get() float64 {
	now := time.Now().UnixNano()
	if now-c.started.Load() > int64(c.every) && c.busy.CompareAndSwap(false, true) {
		c.started.Store(now)
		go func() {
			defer c.busy.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			n, err := c.count(ctx)
			if err != nil {
				n = -1
			}
			c.value.Store(n)
		}()
	}
	return float64(c.value.Load())
}
