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
