package main

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"
)

// latencies collects samples; safe for concurrent use. It keeps them in chunks, so that an
// add never copies the others under the lock (as one slice of millions of samples, a
// growth took up to 80 ms: see ledger).
type latencies struct {
	mu     sync.Mutex
	chunks [][]time.Duration
}

// latencyChunk is the largest chunk; the first hold 256, 512, ... samples, so that the
// many small sets (the fan-out's one per version) stay small.
const latencyChunk = 1 << 16

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	if n := len(l.chunks); n == 0 || len(l.chunks[n-1]) == cap(l.chunks[n-1]) {
		size := latencyChunk
		if n < 8 {
			size = 256 << n
		}
		l.chunks = append(l.chunks, make([]time.Duration, 0, size))
	}
	last := &l.chunks[len(l.chunks)-1]
	*last = append(*last, d)
	l.mu.Unlock()
}

// all is every sample so far, in the order added, in one new slice.
func (l *latencies) all() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.chunks {
		n += len(c)
	}
	s := make([]time.Duration, 0, n)
	for _, c := range l.chunks {
		s = append(s, c...)
	}
	return s
}

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
