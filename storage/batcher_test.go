package storage_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestBatcherGathersWaitingCalls: calls made while the worker is busy form one batch, in
// order, and each caller gets its own result; after Close the queued calls are still
// handled and new ones are refused.
func TestBatcherGathersWaitingCalls(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var batches [][]int
	b := storage.NewBatcher(1, 100, func(items []int) []storage.Result[string] {
		mu.Lock()
		batches = append(batches, append([]int(nil), items...))
		first := len(batches) == 1
		mu.Unlock()
		if first {
			close(entered)
			<-release
		}
		out := make([]storage.Result[string], len(items))
		for i, v := range items {
			if v < 0 {
				out[i].Err = fmt.Errorf("negative %d", v)
			} else {
				out[i].Value = fmt.Sprint("item-", v)
			}
		}
		return out
	})
	ctx := context.Background()
	first := make(chan string, 1)
	go func() { v, _ := b.Do(ctx, 0); first <- v }()
	<-entered

	const n = 10
	got := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := i
			if i == 5 {
				v = -5
			}
			got[i-1], errs[i-1] = b.Do(ctx, v)
		}()
	}
	for b.Queued() < n {
		runtimeGosched()
	}
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	close(release)
	wg.Wait()
	<-closed
	if v := <-first; v != "item-0" {
		t.Fatalf("first call got %q", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 2 || len(batches[1]) != n {
		t.Fatalf("batches %v, want [0] then the %d waiting calls together", batches, n)
	}
	for i := 1; i <= n; i++ {
		switch {
		case i == 5 && (errs[i-1] == nil || got[i-1] != ""):
			t.Errorf("call 5: %q, %v; want its own error", got[i-1], errs[i-1])
		case i != 5 && (errs[i-1] != nil || got[i-1] != fmt.Sprint("item-", i)):
			t.Errorf("call %d: %q, %v", i, got[i-1], errs[i-1])
		}
	}
	if _, err := b.Do(ctx, 1); !errors.Is(err, storage.ErrBatcherClosed) {
		t.Fatalf("Do after Close: %v, want ErrBatcherClosed", err)
	}
}

// TestBatcherRespectsTheCallersContext: a caller whose context ends stops waiting.
func TestBatcherRespectsTheCallersContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := storage.NewBatcher(1, 10, func(items []int) []storage.Result[int] {
		<-release
		return make([]storage.Result[int], len(items))
	})
	defer b.Close()
	defer close(release)
	go func() { _, _ = b.Do(context.Background(), 1) }() // occupies the worker
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := b.Do(ctx, 2); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with a cancelled context: %v", err)
	}
}

// TestPendingWaitedTwiceNeverStealsAnotherResult: Pending is a value (copies share its
// reply channel), so a second Wait on an answered Pending, or on a copy of it, must only
// block until its ctx ends: never take the result of a later item, as it did while
// replies were reused (found by a review, and the reuse taken out).
func TestPendingWaitedTwiceNeverStealsAnotherResult(t *testing.T) {
	ctx := context.Background()
	b := storage.NewBatcher(1, 10, func(items []int) []storage.Result[int] {
		out := make([]storage.Result[int], len(items))
		for i, it := range items {
			out[i] = storage.Result[int]{Value: it}
		}
		return out
	})
	defer b.Close()
	for attempt := range 3 {
		a := b.Go(ctx, 1000+attempt)
		aCopy := a // e.g. a struct holding the Pending, copied
		if v, err := a.Wait(ctx); err != nil || v != 1000+attempt {
			t.Fatalf("first item: %v, %v", v, err)
		}
		next := b.Go(ctx, 2000+attempt) // another caller's item

		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		stolen, err := aCopy.Wait(short) // answered already: nothing more may come
		cancel()
		if err == nil {
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			v, nextErr := next.Wait(short)
			cancel()
			t.Fatalf("a second Wait on an answered Pending returned %d, the next item's result; "+
				"the next item's own Wait got %d, %v", stolen, v, nextErr)
		}
		if v, err := next.Wait(ctx); err != nil || v != 2000+attempt {
			t.Fatalf("next item: %v, %v", v, err)
		}
	}
}

func runtimeGosched() { runtime.Gosched() }

// TestLingeringBatcherWaitsForMore: a worker that took an item waits for more until its
// batch is full, its linger is over, or the batcher closes; then the batch goes at once.
func TestLingeringBatcherWaitsForMore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log batchLog
	b := storage.NewLingeringBatcher(1, 3, time.Hour, log.handle)
	waits := []storage.Pending[int]{b.Go(ctx, 1)}
	for b.Queued() > 0 { // the worker took 1 and waits for more
		runtime.Gosched()
	}
	for i := 2; i <= 5; i++ {
		waits = append(waits, b.Go(ctx, i))
	}
	for i, p := range waits[:3] { // full: handed over without waiting out the hour
		if v, err := p.Wait(ctx); err != nil || v != i+1 {
			t.Fatalf("item %d: %v, %v", i+1, v, err)
		}
	}
	b.Close() // 4 and 5 wait in a batch that is not full: Close hands it over
	for i, p := range waits[3:] {
		if v, err := p.Wait(ctx); err != nil || v != i+4 {
			t.Fatalf("item %d: %v, %v", i+4, v, err)
		}
	}
	if got := log.String(); got != "[[1 2 3] [4 5]]" {
		t.Errorf("batches %s, want [[1 2 3] [4 5]]", got)
	}

	short := storage.NewLingeringBatcher(1, 3, 10*time.Millisecond, log.handle)
	defer short.Close()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if v, err := short.Do(wctx, 7); err != nil || v != 7 { // alone: handed over when the linger ends
		t.Fatalf("lone item: %v, %v", v, err)
	}
}

// TestAdaptiveBatcherLingersOnlyUnderLoad: an adaptive batcher's worker hands a lone
// item over at once (or nearly) while items come slowly, however long its linger; once
// they came fast, it waits for more; after a quiet spell it serves a lone item at once
// again. The rate is measured on a clock the test moves; the wait is real (a minute at
// most: waiting it out would miss the test's deadline).
func TestAdaptiveBatcherLingersOnlyUnderLoad(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var (
		log   batchLog
		mu    sync.Mutex
		clock = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	)
	b := storage.NewAdaptiveBatcher(1, 3, time.Minute, log.handle)
	defer b.Close()
	storage.SetBatcherClock(b, func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock
	})
	advance := func(d time.Duration) {
		mu.Lock()
		clock = clock.Add(d)
		mu.Unlock()
	}
	wait := func(item int, p storage.Pending[int]) {
		t.Helper()
		if _, err := p.Wait(ctx); err != nil {
			t.Fatalf("item %d was not handed over: %v", item, err)
		}
	}
	do := func(item int) { t.Helper(); wait(item, b.Go(ctx, item)) }

	do(1) // no rate known yet: at once
	advance(10 * time.Hour)
	do(2) // one item in 10 hours: a linger of 66 ms
	do(3)
	do(4)
	advance(time.Second)
	five := b.Go(ctx, 5) // three items in a second fill half a batch in far less than a minute
	for b.Queued() > 0 { // the worker took 5
		runtime.Gosched()
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := five.Wait(short)
	cancelShort()
	if err == nil {
		t.Fatal("5 was handed over at once, alone: the worker did not wait for more")
	}
	six, seven := b.Go(ctx, 6), b.Go(ctx, 7)
	wait(5, five)
	wait(6, six)
	wait(7, seven)
	advance(10 * time.Hour)
	do(8) // quiet again: at once
	if got, want := log.String(), "[[1] [2] [3] [4] [5 6 7] [8]]"; got != want {
		t.Errorf("batches %s, want %s", got, want)
	}
}

// TestLoadLinger: the adaptive linger is the part of the linger that gathers half a batch
// at the rate given, the whole linger from there on.
func TestLoadLinger(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		perSecond float64
		want      time.Duration
	}{
		{0, 0},
		{200, 1280 * time.Microsecond},
		{2000, 12800 * time.Microsecond},
		{5000, 32 * time.Millisecond},
		{6250, 40 * time.Millisecond},
		{100000, 40 * time.Millisecond},
	} {
		if got := storage.LoadLinger(40*time.Millisecond, 500, c.perSecond); (got - c.want).Abs() > time.Microsecond {
			t.Errorf("%v items/s: linger %v, want %v", c.perSecond, got, c.want)
		}
	}
}

// TestGatheringBatcherGathersInOneWorker: with two workers, the second item queued while
// the first worker lingers joins that worker's batch; the idle worker does not take it
// into a batch of its own.
func TestGatheringBatcherGathersInOneWorker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var log batchLog
	b := storage.NewGatheringBatcher(2, 2, time.Hour, log.handle)
	defer b.Close()
	time.Sleep(100 * time.Millisecond) // both workers wait for items (else this cannot tell)
	first := b.Go(ctx, 1)
	for b.Queued() > 0 { // a worker took 1 and lingers
		runtime.Gosched()
	}
	second := b.Go(ctx, 2)
	for _, p := range []storage.Pending[int]{first, second} { // a full batch goes at once
		if _, err := p.Wait(ctx); err != nil {
			t.Fatalf("%v: 1 and 2 were not handed over together", err)
		}
	}
	if got := log.String(); got != "[[1 2]]" {
		t.Errorf("batches %s, want [[1 2]]", got)
	}
}

// batchLog records the batches a batcher hands over; its handle answers each item with
// the item itself.
type batchLog struct {
	mu      sync.Mutex
	batches []string
}

func (l *batchLog) handle(items []int) []storage.Result[int] {
	l.mu.Lock()
	l.batches = append(l.batches, fmt.Sprint(items))
	l.mu.Unlock()
	out := make([]storage.Result[int], len(items))
	for i, v := range items {
		out[i].Value = v
	}
	return out
}

func (l *batchLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.batches)
}
