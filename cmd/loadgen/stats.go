package main

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"
)

// chunked is a growing list, safe for concurrent use, that keeps its values in chunks so
// that adding one never copies the others under the lock. As one slice of millions of
// values, each growth copied it whole: for the ledger's events over 100 MB, 40–290 ms on
// an idle machine, in which every finished send waited with its in-flight slot held and
// the open loop dropped sends at its bound (the stalls of the 15-minute runs). The first
// chunks hold 256, 512, ... values, so that the many small lists (the fan-out's latencies,
// one per version) stay small; from the ninth on, maxChunk.
type chunked[T any] struct {
	mu     sync.Mutex
	chunks [][]T
}

const maxChunk = 1 << 16

func (c *chunked[T]) add(v T) {
	c.mu.Lock()
	if n := len(c.chunks); n == 0 || len(c.chunks[n-1]) == cap(c.chunks[n-1]) {
		size := maxChunk
		if n < 8 {
			size = 256 << n
		}
		c.chunks = append(c.chunks, make([]T, 0, size))
	}
	last := &c.chunks[len(c.chunks)-1]
	*last = append(*last, v)
	c.mu.Unlock()
}

// all is every value so far, in the order added, in one new slice.
func (c *chunked[T]) all() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ch := range c.chunks {
		n += len(ch)
	}
	out := make([]T, 0, n)
	for _, ch := range c.chunks {
		out = append(out, ch...)
	}
	return out
}

// each calls fn with every value so far, in the order added, under the lock.
func (c *chunked[T]) each(fn func(T)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.chunks {
		for _, v := range ch {
			fn(v)
		}
	}
}

// latencies collects samples; safe for concurrent use.
type latencies struct{ chunked[time.Duration] }

// summary is a latency distribution in milliseconds.
type summary struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

func (l *latencies) summary() summary { return summarize(l.all()) }

// summarize is the distribution of samples (in any order; it sorts them).
func summarize(s []time.Duration) summary {
	if len(s) == 0 {
		return summary{}
	}
	slices.Sort(s)
	var total time.Duration
	for _, d := range s {
		total += d
	}
	return summary{
		Count: len(s),
		P50:   ms(quantile(s, 0.50)),
		P95:   ms(quantile(s, 0.95)),
		P99:   ms(quantile(s, 0.99)),
		Max:   ms(s[len(s)-1]),
		Mean:  ms(total / time.Duration(len(s))),
	}
}

// quantile is the nearest-rank quantile of sorted samples.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*100) / 100 }

// counter counts outcomes by a key such as "503 dependency_unavailable" and keeps one sample
// message per key; safe for concurrent use.
type counter struct {
	mu      sync.Mutex
	counts  map[string]int64
	samples map[string]string
}

func (c *counter) add(key, sample string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts, c.samples = map[string]int64{}, map[string]string{}
	}
	c.counts[key]++
	if _, ok := c.samples[key]; !ok && sample != "" {
		c.samples[key] = sample
	}
}

// errorCount is one row of an error report.
type errorCount struct {
	Key    string `json:"key"`
	Count  int64  `json:"count"`
	Sample string `json:"sample,omitempty"`
}

func (c *counter) rows() []errorCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	rows := make([]errorCount, 0, len(c.counts))
	for k, n := range c.counts {
		rows = append(rows, errorCount{Key: k, Count: n, Sample: c.samples[k]})
	}
	slices.SortFunc(rows, func(a, b errorCount) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Key, b.Key)) })
	return rows
}

func (c *counter) total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, v := range c.counts {
		n += v
	}
	return n
}
