package main

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"
)

// latencies collects samples; safe for concurrent use.
type latencies struct {
	mu      sync.Mutex
	samples []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.samples = append(l.samples, d)
	l.mu.Unlock()
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

func (l *latencies) summary() summary {
	l.mu.Lock()
	s := slices.Clone(l.samples)
	l.mu.Unlock()
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
