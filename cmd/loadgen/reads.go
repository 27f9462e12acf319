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
	cpu        cpuUsage  // by process group, over the sub-phase

	// Page walks: pages read past the first one, and the deepest page reached.
	pagesDeep, maxDepth atomic.Int64
	restarts            atomic.Int64 // walks that reached the last page and started over
}

// reader is one closed-loop worker's source of requests: next returns the path of the
// next read, given the body of the previous successful answer (nil at first and after an
// error).
type reader interface {
	next(prev []byte) string
}

// statelessReader reads path() every time.
type statelessReader func() string

func (f statelessReader) next([]byte) string { return f() }

// runReads runs cfg.Concurrency closed-loop readers for cfg.ReadDuration, each with its own
// reader from newReader, and samples the processes' CPU around them.
func (b *bench) runReads(ctx context.Context, name string, newReader func(ph *readPhase) reader) *readPhase {
	ph := &readPhase{name: name}
	cpu0 := b.procs.sample()
	ph.start = time.Now()
	deadline := ph.start.Add(b.cfg.ReadDuration)
	var wg sync.WaitGroup
	for range b.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd := newReader(ph)
			var prev []byte
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				ans, err := b.api.do(ctx, http.MethodGet, rd.next(prev), nil)
				if err == nil && ans.status == http.StatusOK {
					ph.latency.add(time.Since(t0))
					ph.ok.Add(1)
					prev = ans.body
					continue
				}
				prev = nil
				ph.errs.add(errorKey(ans, err))
			}
		}()
	}
	wg.Wait()
	ph.end = time.Now()
	ph.cpu = cpuBetween(cpu0, b.procs.sample(), b.procs.hz)
	return ph
}

// readPhases runs top-10 reads, then rank reads of random users that have a score.
func (b *bench) readPhases(ctx context.Context) []*readPhase {
	top := func(*readPhase) reader {
		return statelessReader(func() string { return "/v1/leaderboard/top?limit=10" })
	}
	out := []*readPhase{b.runReads(ctx, "top-10", top)}
	b.printRead(out[0])
	known := b.users.known()
	if len(known) == 0 {
		fmt.Fprintln(b.out, "reads: no user has an accepted score; skipping user rank reads")
		return out
	}
	rank := func(*readPhase) reader {
		return statelessReader(func() string {
			id := known[rand.IntN(len(known))]
			return "/v1/leaderboard/users/" + url.PathEscape(b.users.names[id])
		})
	}
	out = append(out, b.runReads(ctx, "user rank", rank))
	b.printRead(out[1])
	return out
}
