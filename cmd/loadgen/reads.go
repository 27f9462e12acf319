package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// readPhase is the result of one read sub-phase.
type readPhase struct {
	name       string
	start, end time.Time
	ok         atomic.Int64
	errs       counter
	latency    latencies // successful reads
}

// runReads runs cfg.Concurrency closed-loop readers of path() for cfg.ReadDuration.
func (b *bench) runReads(ctx context.Context, name string, path func() string) *readPhase {
	ph := &readPhase{name: name, start: time.Now()}
	deadline := ph.start.Add(b.cfg.ReadDuration)
	var wg sync.WaitGroup
	for range b.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				ans, err := b.api.do(ctx, http.MethodGet, path(), nil)
				if err == nil && ans.status == http.StatusOK {
					ph.latency.add(time.Since(t0))
					ph.ok.Add(1)
					continue
				}
				ph.errs.add(errorKey(ans, err))
			}
		}()
	}
	wg.Wait()
	ph.end = time.Now()
	return ph
}

// readPhases runs top-10 reads, then rank reads of random users that have a score.
func (b *bench) readPhases(ctx context.Context) []*readPhase {
	out := []*readPhase{b.runReads(ctx, "top-10", func() string { return "/v1/leaderboard/top?limit=10" })}
	b.printRead(out[0])
	known := b.users.known()
	if len(known) == 0 {
		fmt.Fprintln(b.out, "reads: no user has an accepted score; skipping user rank reads")
		return out
	}
	out = append(out, b.runReads(ctx, "user rank", func() string {
		id := known[rand.IntN(len(known))]
		return "/v1/leaderboard/users/" + url.PathEscape(b.users.names[id])
	}))
	b.printRead(out[1])
	return out
}
