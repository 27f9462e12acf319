package main

import (
	"context"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// writePhase is the state and result of one write phase.
type writePhase struct {
	name    string
	mode    string
	offered float64 // submissions per second, open loop only

	start, windowEnd, end time.Time

	issued, dropped, accepted, inWindow, unchanged atomic.Int64
	errs                                           counter
	acceptLatency                                  latencies

	visLatency latencies
	visPending atomic.Int64
	notVisible int64

	cpu          time.Duration // loadgen's own CPU time during the phase
	drainedAfter time.Duration // from the last answer until score_history held every 202; 0 if unknown
}

// visible records that a score accepted at acceptedAt was seen in Redis at now.
func (ph *writePhase) visible(now, acceptedAt time.Time) {
	ph.visLatency.add(now.Sub(acceptedAt))
	ph.visPending.Add(-1)
}

// runFixedRate offers cfg.Rate submissions per second for cfg.Duration, open loop: the i-th
// is scheduled at start + i/rate whatever happened to the others, and its latency is
// measured from that scheduled time, so a stalled service shows up as latency instead of
// silently lowering the offered load. At most cfg.MaxInflight requests are in flight; a
// scheduled send over that bound is dropped and counted.
func (b *bench) runFixedRate(ctx context.Context) *writePhase {
	ph := &writePhase{name: "A fixed rate", mode: "open loop", offered: b.cfg.Rate}
	n := int64(math.Round(b.cfg.Duration.Seconds() * b.cfg.Rate))
	perSend := float64(time.Second) / b.cfg.Rate
	sem := make(chan struct{}, b.cfg.MaxInflight)
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	ph.start = time.Now().Add(5 * time.Millisecond)
	ph.windowEnd = ph.start.Add(b.cfg.Duration)
	for i := int64(0); i < n && ctx.Err() == nil; i++ {
		sched := ph.start.Add(time.Duration(float64(i) * perSend))
		if d := time.Until(sched); d > 0 {
			time.Sleep(d)
		}
		select {
		case sem <- struct{}{}:
		default:
			ph.dropped.Add(1)
			continue
		}
		user, ok := b.users.acquire()
		if !ok {
			<-sem
			ph.dropped.Add(1)
			continue
		}
		ph.issued.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.send(ctx, ph, user, sched)
			<-sem
		}()
	}
	wg.Wait()
	ph.end = time.Now()
	ph.cpu = cpuTime() - cpu0
	return ph
}

// runSaturation runs cfg.Concurrency closed-loop workers for cfg.Duration, each sending its
// next submission as soon as the previous one is answered.
func (b *bench) runSaturation(ctx context.Context) *writePhase {
	ph := &writePhase{name: "B saturation", mode: "closed loop"}
	cpu0 := cpuTime()
	ph.start = time.Now()
	ph.windowEnd = ph.start.Add(b.cfg.Duration)
	var wg sync.WaitGroup
	for range b.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(ph.windowEnd) {
				user, ok := b.users.acquire()
				if !ok {
					time.Sleep(time.Millisecond)
					continue
				}
				ph.issued.Add(1)
				b.send(ctx, ph, user, time.Now())
			}
		}()
	}
	wg.Wait()
	ph.end = time.Now()
	ph.cpu = cpuTime() - cpu0
	return ph
}

// send submits the user's next score and records the answer; from is when the request was
// due (open loop) or sent (closed loop). It releases the user when done.
func (b *bench) send(ctx context.Context, ph *writePhase, user int32, from time.Time) {
	defer b.users.release(user)
	score := b.users.next(user)
	ev := event{id: uuid.NewString(), user: user, score: score, outcome: ambiguous}
	ans, err := b.api.submit(ctx, ev.id, b.users.names[user], score)
	now := time.Now()
	switch {
	case err == nil && ans.status == http.StatusAccepted:
		ev.outcome = accepted
		ph.accepted.Add(1)
		if !now.After(ph.windowEnd) {
			ph.inWindow.Add(1)
		}
		ph.acceptLatency.add(now.Sub(from))
		b.users.best[user] = score
		b.vis.add(user, score, now, ph)
	case err == nil && ans.status == http.StatusOK && strings.Contains(string(ans.body), `"unchanged"`):
		ev.outcome = unchanged
		ph.unchanged.Add(1)
	case err == nil && ans.status < 500:
		ev.outcome = rejected
		if ans.status < 300 {
			ans.code = "unexpected_answer"
			ans.msg = string(ans.body)
		}
		ph.errs.add(errorKey(ans, nil))
	default: // 5xx or no answer: the command may or may not be durable
		ph.errs.add(errorKey(ans, err))
	}
	b.ledger.add(ev)
}
