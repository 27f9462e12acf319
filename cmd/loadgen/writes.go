package main

import (
	"context"
	"math"
	"math/rand/v2"
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
	mixed   bool    // the mixed phase: kinds are reported one by one

	start, windowEnd, end time.Time

	issued, dropped, accepted, inWindow, unchanged atomic.Int64
	errs                                           counter
	acceptLatency                                  latencies
	// answerLatency is every answered send's, whatever its answer (a refusal, a 5xx, no
	// answer at its timeout): the rate's p99 is judged on it too, so that slow failures
	// within the error budget do not leave the p99 of the 202s flattering.
	answerLatency latencies

	visLatency latencies
	visPending atomic.Int64
	notVisible int64

	// kinds breaks the phase down by kind (only best in phases A and B).
	kinds [numKinds]kindStats

	// players, when set, gives each best score its user's player token (no user_id in the
	// body) instead of the server token: the writes of the limiter phase's "on" runs.
	players *playerTokens

	// win counts accepted and applied commands per -window of the phase.
	win *windows

	cpu          time.Duration // loadgen's own CPU time during the phase
	drainedAfter time.Duration // from the last answer until score_history held every 202; 0 if unknown

	// Marks of CPU by process group and score_history rows: at the phase's start, after
	// its last answer, and once the pipeline drained.
	m0, m1, m2 mark
}

// kindStats is one kind's share of a write phase.
type kindStats struct {
	offered                   float64 // per second, open loop
	issued, dropped           atomic.Int64
	accepted, inWindow        atomic.Int64
	errs                      counter
	acceptLatency, visLatency latencies
	notVisible                int64
}

// visible records that a value of kind k accepted at acceptedAt was seen in Redis at now.
func (ph *writePhase) visible(k kind, now, acceptedAt time.Time) {
	ph.visLatency.add(now.Sub(acceptedAt))
	ph.kinds[k].visLatency.add(now.Sub(acceptedAt))
	ph.visPending.Add(-1)
}

// runFixedRate offers cfg.Rate best scores per second for cfg.Duration, open loop.
func (b *bench) runFixedRate(ctx context.Context) *writePhase {
	ph := &writePhase{name: "A fixed rate", mode: "open loop", offered: b.cfg.Rate}
	ph.kinds[kindBest].offered = b.cfg.Rate
	b.openLoop(ctx, ph, b.cfg.Rate, func() kind { return kindBest })
	return ph
}

// runMixed offers cfg.MixedRate commands per second for cfg.Duration, open loop, each of a
// kind drawn by the -mix weights: best scores, increments, match points.
func (b *bench) runMixed(ctx context.Context) *writePhase {
	ph := &writePhase{name: "mixed", mode: "open loop", offered: b.cfg.MixedRate, mixed: true}
	total := b.cfg.Mix.total()
	for k := range numKinds {
		ph.kinds[k].offered = b.cfg.MixedRate * b.cfg.Mix[k] / total
	}
	b.openLoop(ctx, ph, b.cfg.MixedRate, func() kind { return b.cfg.Mix.pick(rand.Float64()) })
	return ph
}

// openLoop offers rate sends per second for cfg.Duration, open loop: the i-th is scheduled
// at start + i/rate whatever happened to the others, and its latency is measured from that
// scheduled time, so a stalled service shows up as latency instead of silently lowering the
// offered load. At most cfg.MaxInflight requests are in flight; a scheduled send over that
// bound (or for which every user has one of its kind in flight) is dropped and counted.
func (b *bench) openLoop(ctx context.Context, ph *writePhase, rate float64, pick func() kind) {
	n := int64(math.Round(b.cfg.Duration.Seconds() * rate))
	perSend := float64(time.Second) / rate
	sem := make(chan struct{}, b.cfg.MaxInflight)
	// The sends run on MaxInflight long-lived workers rather than a goroutine each: a new
	// goroutine grows its stack through net/http's call depth on every send, which cost
	// the load generator about a tenth of its CPU. sem still bounds what is in flight, so
	// jobs (as large as that bound) never blocks.
	type job struct {
		k     kind
		user  int32
		sched time.Time
	}
	jobs := make(chan job, b.cfg.MaxInflight)
	var wg sync.WaitGroup
	for range b.cfg.MaxInflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				b.send(ctx, ph, j.k, j.user, j.sched)
				<-sem
			}
		}()
	}
	ph.m0 = b.mark(ctx)
	cpu0 := cpuTime()
	ph.start = time.Now().Add(5 * time.Millisecond)
	ph.windowEnd = ph.start.Add(b.cfg.Duration)
	ph.win = newWindows(ph.start, b.cfg.Duration, b.cfg.Window)
	for i := int64(0); i < n && ctx.Err() == nil; i++ {
		sched := ph.start.Add(time.Duration(float64(i) * perSend))
		if d := time.Until(sched); d > 0 {
			time.Sleep(d)
		}
		k := pick()
		select {
		case sem <- struct{}{}:
		default:
			ph.dropped.Add(1)
			ph.kinds[k].dropped.Add(1)
			continue
		}
		user, ok := b.users.acquireKind(k)
		if !ok {
			<-sem
			ph.dropped.Add(1)
			ph.kinds[k].dropped.Add(1)
			continue
		}
		ph.issued.Add(1)
		ph.kinds[k].issued.Add(1)
		jobs <- job{k, user, sched}
	}
	close(jobs)
	wg.Wait()
	ph.end = time.Now()
	ph.cpu = cpuTime() - cpu0
	ph.m1 = b.mark(ctx)
}

// runSaturation runs cfg.Concurrency closed-loop writers of best scores for cfg.Duration,
// each sending its next submission as soon as the previous one is answered.
func (b *bench) runSaturation(ctx context.Context) *writePhase {
	ph := &writePhase{name: "B saturation", mode: "closed loop"}
	b.closedLoop(ctx, ph, b.cfg.Duration)
	return ph
}

// closedLoop runs cfg.Concurrency closed-loop writers of best scores on global for d, each
// sending its next submission as soon as the previous one is answered (with ph.players'
// token of the user when set, the server token otherwise).
func (b *bench) closedLoop(ctx context.Context, ph *writePhase, d time.Duration) {
	ph.m0 = b.mark(ctx)
	cpu0 := cpuTime()
	ph.start = time.Now()
	ph.windowEnd = ph.start.Add(d)
	ph.win = newWindows(ph.start, d, b.cfg.Window)
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
				ph.kinds[kindBest].issued.Add(1)
				b.send(ctx, ph, kindBest, user, time.Now())
			}
		}()
	}
	wg.Wait()
	ph.end = time.Now()
	ph.cpu = cpuTime() - cpu0
	ph.m1 = b.mark(ctx)
}

// send submits the user's next value of kind k and records the answer; from is when the
// request was due (open loop) or sent (closed loop). It releases the user when done.
func (b *bench) send(ctx context.Context, ph *writePhase, k kind, user int32, from time.Time) {
	defer b.users.releaseKind(k, user)
	ks := &ph.kinds[k]
	ev := event{id: uuid.NewString(), user: user, kind: k, outcome: ambiguous}
	name := b.users.names[user]
	var ans answer
	var err error
	switch k {
	case kindBest:
		ev.score = b.users.next(user)
		if ph.players == nil {
			ans, err = b.api.submit(ctx, ev.id, name, ev.score)
			break
		}
		var auth string
		if auth, err = ph.players.auth(name); err == nil {
			ans, err = b.api.submitPlayer(ctx, auth, ev.id, ev.score)
		}
	case kindIncr:
		ev.score = 1 + rand.Int64N(100)
		ans, err = b.api.increment(ctx, ev.id, name, ev.score, time.Now())
	case kindMatch:
		ev.score = 1 + rand.Int64N(100)
		ans, err = b.api.matchPoint(ctx, b.matches.ids[b.matches.of(user)], ev.id, name, ev.score)
	}
	now := time.Now()
	ph.answerLatency.add(now.Sub(from))
	switch {
	case err == nil && ans.status == http.StatusAccepted:
		ev.outcome = accepted
		ph.accepted.Add(1)
		ks.accepted.Add(1)
		if !now.After(ph.windowEnd) {
			ph.inWindow.Add(1)
			ks.inWindow.Add(1)
		}
		ph.acceptLatency.add(now.Sub(from))
		ks.acceptLatency.add(now.Sub(from))
		ph.win.accept(now, now.Sub(from))
		reach := b.users.accept(k, user, ev.score) // every accepted value counts in the running sums
		if b.cfg.VisSample >= 1 || rand.Float64() < b.cfg.VisSample {
			b.vis.add(k, user, reach, now, ph)
		}
	case err == nil && k == kindBest && ans.status == http.StatusOK && strings.Contains(string(ans.body), `"unchanged"`):
		ev.outcome = unchanged
		ph.unchanged.Add(1)
	case err == nil && ans.status < 500:
		ev.outcome = rejected
		if ans.status < 300 {
			ans.code = "unexpected_answer"
			ans.msg = string(ans.body)
		}
		key, sample := errorKey(ans, nil)
		ph.errs.add(key, sample)
		ks.errs.add(key, sample)
	default: // 5xx or no answer: the command may or may not be durable
		key, sample := errorKey(ans, err)
		ph.errs.add(key, sample)
		ks.errs.add(key, sample)
	}
	b.ledger.add(ev)
}
