package main

import (
	"testing"
	"time"
)

// TestPollWaitBoundsReads: the poller keeps its period while few users are pending and
// slows to maxReads users a second when many are.
func TestPollWaitBoundsReads(t *testing.T) {
	for _, c := range []struct {
		n, maxReads int
		want        time.Duration
	}{
		{0, 20000, 5 * time.Millisecond},
		{100, 20000, 5 * time.Millisecond},  // 100 users every 5 ms: exactly 20,000 a second
		{200, 20000, 10 * time.Millisecond}, // 200 users: every 10 ms
		{20000, 20000, time.Second},         // a backlog of 20,000 users: once a second
		{20000, 0, 5 * time.Millisecond},    // no bound
	} {
		if got := pollWait(5*time.Millisecond, c.n, c.maxReads); got != c.want {
			t.Errorf("pollWait(5ms, %d, %d) = %s, want %s", c.n, c.maxReads, got, c.want)
		}
	}
}
