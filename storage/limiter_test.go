package storage_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestLimiterSpendsExactBudget: concurrent writes of one subject, sharing pipelines, are
// allowed exactly up to the limit; other subjects have their own budget; after Redis
// lost its scripts the limiter still answers (redis_rate falls back to EVAL).
func TestLimiterSpendsExactBudget(t *testing.T) {
	ctx := context.Background()
	rdb, prefix, pipe := newTestPipe(t)
	l := storage.NewLimiter(rdb, prefix, pipe)
	t.Cleanup(func() { // redis_rate puts its own "rate:" before our prefix
		rdb.Del(context.Background(), "rate:"+prefix+":{user:a}", "rate:"+prefix+":{user:b}")
	})
	spend := func(subject string, writes int) int64 {
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for range writes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, _, err := l.Allow(ctx, subject, 10, time.Hour)
				if err != nil {
					t.Error(err)
				}
				if ok {
					allowed.Add(1)
				}
			}()
		}
		wg.Wait()
		return allowed.Load()
	}
	if n := spend("user:a", 50); n != 10 {
		t.Fatalf("%d of 50 concurrent writes allowed, want the limit 10", n)
	}
	ok, retry, err := l.Allow(ctx, "user:a", 10, time.Hour)
	if err != nil || ok || retry <= 0 || retry > 6*time.Minute {
		t.Fatalf("the 51st: allowed %v, retry %v, %v; want refused, retry within one emission interval (6 min)", ok, retry, err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n := spend("user:b", 30); n != 10 {
		t.Fatalf("another subject after the scripts were flushed: %d of 30 allowed, want 10", n)
	}
}

// TestLimiterRefundGivesOneWriteBack: a refund gives back exactly the write Allow spent
// (a retry's): after three of 3 and one refund, one more write passes and the next does
// not; a refund of a budget nothing was spent of leaves it full, not above its limit.
func TestLimiterRefundGivesOneWriteBack(t *testing.T) {
	ctx := context.Background()
	rdb, prefix, pipe := newTestPipe(t)
	l := storage.NewLimiter(rdb, prefix, pipe)
	t.Cleanup(func() { rdb.Del(context.Background(), "rate:"+prefix+":{user:r}", "rate:"+prefix+":{user:f}") })
	allow := func(subject string) bool {
		t.Helper()
		ok, _, err := l.Allow(ctx, subject, 3, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	refund := func(subject string) {
		t.Helper()
		if err := l.Refund(ctx, subject, 3, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if !allow("user:r") {
			t.Fatalf("write %d of 3 refused", i+1)
		}
	}
	refund("user:r")
	if !allow("user:r") {
		t.Fatal("after a refund: refused, want the refunded write allowed")
	}
	if allow("user:r") {
		t.Fatal("after the refunded write: allowed, want refused (one write given back, not more)")
	}

	refund("user:f") // nothing spent: no budget above the limit
	refund("user:f")
	n := 0
	for range 5 {
		if allow("user:f") {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("refunds of a full budget: %d of 5 writes allowed, want the limit 3", n)
	}
}
