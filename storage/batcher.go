package storage

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrBatcherClosed is returned by Batcher.Do once Close has been called.
var ErrBatcherClosed = errors.New("batcher closed")

// Result is one item's outcome in a batch.
type Result[R any] struct {
	Value R
	Err   error
}

// Batcher gathers concurrent calls into batches: each worker takes the first waiting
// item, adds whatever else is queued (up to maxBatch), and hands the batch to handle,
// whose results go back to the callers in order. Under load batches grow; an idle caller
// is served at once (group commit).
type Batcher[T, R any] struct {
	queue    chan pending[T, R]
	maxBatch int
	handle   func([]T) []Result[R]
	// linger is how long a worker waits, after the first item, for more (0: it takes only
	// what is queued).
	linger time.Duration

	// adaptive, when set, scales linger with the load (NewAdaptiveBatcher): arrivals
	// measures it on the clock now.
	adaptive bool
	arrivals arrivals
	now      func() time.Time

	// gather, when oneGatherer is set, is held by the worker gathering a batch, from
	// waiting for its first item until the batch is complete: one worker lingers at a time
	// and batches are not split between workers.
	oneGatherer bool
	gather      sync.Mutex

	mu     sync.RWMutex
	closed bool
	wg     sync.WaitGroup
}

type pending[T, R any] struct {
	item  T
	reply chan Result[R]
}

// NewBatcher starts workers goroutines. handle must return one result per item and must
// not keep the slice it is given (it is reused).
func NewBatcher[T, R any](workers, maxBatch int, handle func([]T) []Result[R]) *Batcher[T, R] {
	return NewLingeringBatcher(workers, maxBatch, 0, handle)
}

// NewLingeringBatcher is NewBatcher whose workers, having taken an item, wait up to linger
// for more before handing a batch that is not full to handle. Workers gather side by side:
// that suits callers that each wait for their batch before they queue again (a Kafka
// partition's handler), whose next items then gather while the other batch is handled.
func NewLingeringBatcher[T, R any](workers, maxBatch int, linger time.Duration, handle func([]T) []Result[R]) *Batcher[T, R] {
	return newBatcher(workers, maxBatch, linger, false, false, handle)
}

// NewAdaptiveBatcher is NewLingeringBatcher whose linger follows the load: a worker waits
// the whole linger only when, at the rate items came lately, a linger brings half a
// batch's worth of items or more (shared by the workers gathering meanwhile), and
// proportionally less below, so that a quiet caller is served at once and busy ones
// share large batches.
func NewAdaptiveBatcher[T, R any](workers, maxBatch int, linger time.Duration, handle func([]T) []Result[R]) *Batcher[T, R] {
	return newBatcher(workers, maxBatch, linger, false, true, handle)
}

// NewGatheringBatcher is NewLingeringBatcher in which one worker gathers at a time while
// the others hand their batches over: for callers that come independently (HTTP
// requests), whose items would otherwise be split between lingering workers.
func NewGatheringBatcher[T, R any](workers, maxBatch int, linger time.Duration, handle func([]T) []Result[R]) *Batcher[T, R] {
	return newBatcher(workers, maxBatch, linger, true, false, handle)
}

func newBatcher[T, R any](workers, maxBatch int, linger time.Duration, oneGatherer, adaptive bool, handle func([]T) []Result[R]) *Batcher[T, R] {
	b := &Batcher[T, R]{queue: make(chan pending[T, R], maxBatch*2), maxBatch: maxBatch, handle: handle, linger: linger,
		oneGatherer: oneGatherer, adaptive: adaptive, now: time.Now}
	for range workers {
		b.wg.Add(1)
		go b.work()
	}
	return b
}

// Do queues item and waits for its result. It returns ctx's error if ctx ends first (the
// item may still be handled) and ErrBatcherClosed after Close.
func (b *Batcher[T, R]) Do(ctx context.Context, item T) (R, error) {
	return b.Go(ctx, item).Wait(ctx)
}

// Go queues item and returns at once; Wait on the answer gets its result. Nothing blocks
// when nobody waits.
func (b *Batcher[T, R]) Go(ctx context.Context, item T) Pending[R] {
	p := pending[T, R]{item: item, reply: make(chan Result[R], 1)}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return Pending[R]{err: ErrBatcherClosed}
	}
	select {
	case b.queue <- p:
		return Pending[R]{reply: p.reply}
	case <-ctx.Done():
		return Pending[R]{err: ctx.Err()}
	}
}

// Pending is the result to come of an item queued by Batcher.Go.
type Pending[R any] struct {
	reply chan Result[R]
	err   error
}

// Wait waits for the result: ctx's error if ctx ends first (the item may still be
// handled), ErrBatcherClosed when the batcher was closed before the item was queued.
func (p Pending[R]) Wait(ctx context.Context) (R, error) {
	var zero R
	if p.err != nil {
		return zero, p.err
	}
	select {
	case r := <-p.reply:
		return r.Value, r.Err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Close stops accepting items, handles what is queued and waits for the workers.
func (b *Batcher[T, R]) Close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.queue)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

func (b *Batcher[T, R]) work() {
	defer b.wg.Done()
	batch := make([]pending[T, R], 0, b.maxBatch)
	items := make([]T, 0, b.maxBatch)
	var timer *time.Timer
	for {
		if b.oneGatherer {
			b.gather.Lock()
		}
		first, ok := <-b.queue
		if !ok {
			if b.oneGatherer {
				b.gather.Unlock()
			}
			return
		}
		batch = append(batch[:0], first)
		var deadline <-chan time.Time
		if linger := b.lingerNow(); linger > 0 {
			if timer == nil {
				timer = time.NewTimer(linger)
			} else {
				timer.Reset(linger)
			}
			deadline = timer.C
		}
	drain:
		for len(batch) < b.maxBatch {
			var (
				p  pending[T, R]
				ok bool
			)
			if deadline == nil { // take only what is queued
				select {
				case p, ok = <-b.queue:
				default:
					break drain
				}
			} else {
				select {
				case p, ok = <-b.queue:
				case <-deadline:
					deadline = nil // lingered: take what else is queued, then go
					continue
				}
			}
			if !ok {
				break drain
			}
			batch = append(batch, p)
		}
		if timer != nil {
			timer.Stop()
		}
		if b.oneGatherer {
			b.gather.Unlock()
		}
		if b.adaptive {
			b.arrivals.took(len(batch))
		}
		items = items[:0]
		for _, p := range batch {
			items = append(items, p.item)
		}
		results := b.handle(items)
		for i, p := range batch {
			p.reply <- results[i]
		}
	}
}

// Queued returns how many items wait for a worker.
func (b *Batcher[T, R]) Queued() int { return len(b.queue) }

// lingerNow is how long a worker that took an item waits for more: linger, or for an
// adaptive batcher loadLinger at the rate items came lately.
func (b *Batcher[T, R]) lingerNow() time.Duration {
	if !b.adaptive || b.linger <= 0 {
		return b.linger
	}
	return loadLinger(b.linger, b.maxBatch, b.arrivals.perSecond(b.now()))
}

// loadLinger is the part of linger that, at perSecond items a second, gathers half a
// batch: the whole linger from that rate up, proportionally less below. With batches of
// 500 and a linger of 40 ms, the whole linger from 6,250 items a second, 13 ms at 2,000.
func loadLinger(linger time.Duration, maxBatch int, perSecond float64) time.Duration {
	if maxBatch <= 0 || perSecond <= 0 {
		return 0
	}
	fill := perSecond * linger.Seconds() / (float64(maxBatch) / 2)
	if fill >= 1 {
		return linger
	}
	return time.Duration(fill * float64(linger))
}

// arrivalWindow is the least time over which arrivals measures a rate.
const arrivalWindow = 250 * time.Millisecond

// arrivals measures how fast a batcher's items come: the items its batches took over the
// last window of at least arrivalWindow.
type arrivals struct {
	mu    sync.Mutex
	start time.Time // of the current window
	n     int       // items taken in it
	rate  float64   // items per second in the last window that ended
}

func (a *arrivals) took(n int) {
	a.mu.Lock()
	a.n += n
	a.mu.Unlock()
}

// perSecond returns the rate of the last window that ended, ending the current one once
// it is arrivalWindow old: after a quiet spell the window that ends is long and its rate
// low, so the first item after it is not held back.
func (a *arrivals) perSecond(now time.Time) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.start.IsZero() {
		a.start = now
		return 0
	}
	if elapsed := now.Sub(a.start); elapsed >= arrivalWindow {
		a.rate, a.start, a.n = float64(a.n)/elapsed.Seconds(), now, 0
	}
	return a.rate
}
