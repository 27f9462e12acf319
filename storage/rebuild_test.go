package storage_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestRebuildLosesNoConcurrentUpdate rebuilds a 20,000-entry board from PostgreSQL while
// a writer keeps changing entries the way the projector does (PostgreSQL first, then
// Redis): afterwards Redis equals PostgreSQL, entry for entry.
func TestRebuildLosesNoConcurrentUpdate(t *testing.T) {
	t.Parallel()
	testRebuildUnderUpdates(t, true)
}

// TestRebuildOfALostBoardLosesNoConcurrentUpdate is the same rebuild of a board Redis lost
// (the rebuild an operator runs after a Redis restart): the writer's Redis writes find the
// board not loaded until the rebuild swaps it in. A projector would load the live board
// meanwhile, but the swap replaces the live board with the rebuilt one: what the rebuild
// read before such a write was made must not win.
func TestRebuildOfALostBoardLosesNoConcurrentUpdate(t *testing.T) {
	t.Parallel()
	testRebuildUnderUpdates(t, false)
}

// testRebuildUnderUpdates rebuilds a board of 20,000 entries, loaded in Redis or not,
// while each entry is changed once.
func testRebuildUnderUpdates(t *testing.T, loaded bool) {
	pool := newMigratedPool(t, 1)
	rdb, prefix := newTestRedis(t)
	ctx := testContext(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO board_entries (board_id, period, user_id, score, sort_key, version, reached_at, updated_at)
		SELECT 'global', 'all_time', 'u' || lpad(i::text, 6, '0'), i % 997, i % 997, 1, now() - i * interval '1 ms', now()
		FROM generate_series(1, 20000) AS i`); err != nil {
		t.Fatal(err)
	}
	boards := storage.NewBoards(rdb, prefix, 100)
	ranks := storage.NewRanks(pool)
	if loaded {
		if _, err := boards.Reload(ctx, ranks, global); err != nil {
			t.Fatal(err)
		}
	}

	var stop atomic.Bool
	var updates atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; !stop.Load() && i <= 20000; i++ {
			// Each entry is changed once, so nothing after the swap can repair a lost update.
			user := fmt.Sprintf("u%06d", i)
			var s storage.EntryState
			err := pool.QueryRow(context.Background(), `
				UPDATE board_entries SET score = score + 1000, sort_key = sort_key + 1000, version = version + 1, reached_at = now(), updated_at = now()
				WHERE board_id = 'global' AND period = 'all_time' AND user_id = $1
				RETURNING board_id, period, user_id, score, sort_key, version, reached_at, updated_at`, user).
				Scan(&s.Board, &s.Period, &s.UserID, &s.Score, &s.SortKey, &s.Version, &s.ReachedAt, &s.UpdatedAt)
			if err != nil {
				t.Error(err)
				return
			}
			// Not loaded: the projector would load the live board, which the swap replaces.
			if _, _, err := boards.Apply(context.Background(), global, []storage.EntryState{s}, nil); err != nil && (loaded || !errors.Is(err, storage.ErrNotLoaded)) {
				t.Error(err)
				return
			}
			updates.Add(1)
		}
	}()
	time.Sleep(20 * time.Millisecond)
	before := updates.Load()
	res, err := boards.Rebuild(ctx, ranks, global)
	during := updates.Load() - before
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != 20000 {
		t.Fatalf("rebuild loaded %d entries", res.Entries)
	}
	if during == 0 {
		t.Fatal("no update ran during the rebuild; the test proves nothing")
	}
	rep, err := boards.CheckConsistency(ctx, ranks, "global", "all_time", true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Consistent {
		t.Fatalf("after a rebuild with %d concurrent updates: %+v", during, rep)
	}
	if n, _ := rdb.Exists(ctx, prefix+":{global}:all_time:rebuild").Result(); n != 0 {
		t.Fatal("rebuild marker left behind")
	}
}

// TestVersionAfterRedisLoss: when Redis lost a board, top version included, the top a
// load on demand or a rebuild makes has a version above every one the board showed before,
// also after rebuilds and loads that no history row accounts for, so streams that saw those
// versions take the new snapshot as newer.
func TestVersionAfterRedisLoss(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	rdb, prefix := newTestRedis(t)
	ctx := testContext(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO score_history (event_id, board_id, period, user_id, operator, value, occurred_at)
		SELECT 'ev-' || i, 'global', 'all_time', 'u' || i, 'best', i, now() FROM generate_series(1, 5) AS i`); err != nil {
		t.Fatal(err)
	}
	seedFive(t, pool)
	ranks := storage.NewRanks(pool)
	boards := storage.NewBoards(rdb, prefix, 100)
	lose := func() {
		iter := rdb.Scan(ctx, 0, prefix+":*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	}
	top, err := boards.Reload(ctx, ranks, global)
	if err != nil {
		t.Fatal(err)
	}
	seen := top.Version
	for range 3 {
		res, err := boards.Rebuild(ctx, ranks, global)
		if err != nil {
			t.Fatal(err)
		}
		if res.Version <= seen {
			t.Fatalf("rebuild: version %d after %d", res.Version, seen)
		}
		seen = res.Version
	}
	lose()
	top, err = boards.Reload(ctx, ranks, global)
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Entries) != 5 || top.Version <= seen {
		t.Fatalf("load after the loss: %d entries, version %d; clients saw version %d", len(top.Entries), top.Version, seen)
	}
	seen = top.Version
	lose()
	res, err := boards.Rebuild(ctx, ranks, global)
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != 5 || res.Version <= seen {
		t.Fatalf("rebuild after the loss: %d entries, version %d; clients saw version %d", res.Entries, res.Version, seen)
	}
}

// TestRebuildLock: while a rebuild holds a board's lock, another rebuild of it is refused
// and changes nothing; other boards and periods are not affected; the lock is free again
// after a rebuild.
func TestRebuildLock(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	rdb, prefix := newTestRedis(t)
	ctx := testContext(t)
	seedFive(t, pool)
	ranks := storage.NewRanks(pool)
	boards := storage.NewBoards(rdb, prefix, 100)
	marker := prefix + ":{global}:all_time:rebuild"
	rdb.Set(ctx, marker, "another-rebuild", time.Minute)
	if _, err := boards.Rebuild(ctx, ranks, global); !errors.Is(err, storage.ErrRebuildRunning) {
		t.Fatalf("rebuild while another holds the lock: %v, want ErrRebuildRunning", err)
	}
	if n := rdb.Exists(ctx, prefix+":{global}:all_time:z").Val(); n != 0 {
		t.Fatalf("the refused rebuild wrote the board")
	}
	if got := rdb.Get(ctx, marker).Val(); got != "another-rebuild" {
		t.Fatalf("the refused rebuild touched the lock: %q", got)
	}
	if _, err := boards.Rebuild(ctx, ranks, storage.Target{Board: "global", Period: "2026-01-01"}); err != nil {
		t.Fatalf("another period is not locked: %v", err)
	}
	rdb.Del(ctx, marker)
	res, err := boards.Rebuild(ctx, ranks, global)
	if err != nil || res.Entries != 5 {
		t.Fatalf("rebuild after the lock was freed: %+v, %v", res, err)
	}
	if rdb.Exists(ctx, marker).Val() != 0 {
		t.Fatal("the lock is held after the rebuild")
	}
}

// TestRebuildDropsBucketsItNoLongerNeeds: Redis holds a big board PostgreSQL does not (say,
// entries since removed); a rebuild leaves exactly PostgreSQL's entries, in as many buckets
// as they need, and no bucket of the old board behind.
func TestRebuildDropsBucketsItNoLongerNeeds(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	f := newBoardsFixture(t, 10)
	ctx := testContext(t)
	states := bigStates(2000, 1)
	for start := 0; start < len(states); start += 500 {
		f.apply(nil, states[start:start+500]...)
	}
	if n := len(f.bucketKeys("global", "all_time")); n < 20 {
		t.Fatalf("2000 entries in %d buckets", n+1)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO board_entries (board_id, period, user_id, score, sort_key, version, reached_at, updated_at)
		SELECT 'global', 'all_time', 'pg-' || i, i, i, 1, now(), now() FROM generate_series(1, 10) AS i`); err != nil {
		t.Fatal(err)
	}
	ranks := storage.NewRanks(pool)
	if _, err := f.boards.Rebuild(ctx, ranks, global); err != nil {
		t.Fatal(err)
	}
	if left := f.bucketKeys("global", "all_time"); len(left) != 0 {
		t.Errorf("buckets left after the rebuild: %v", left)
	}
	if shadow, _ := f.rdb.Keys(ctx, f.prefix+":{global}:all_time:u~*").Result(); len(shadow) != 0 {
		t.Errorf("shadow keys left after the rebuild: %v", shadow)
	}
	rep, err := f.boards.CheckConsistency(ctx, ranks, "global", "all_time", true, 0)
	if err != nil || !rep.Consistent || rep.RedisEntries != 10 {
		t.Fatalf("after the rebuild: %+v, %v", rep, err)
	}
}

// TestFailedRebuildGivesTheLockBack: a rebuild that fails before its swap (PostgreSQL
// unreachable) gives its lock back and drops its shadow keys: a retry runs at once instead
// of getting ErrRebuildRunning until the lock expires a minute later.
func TestFailedRebuildGivesTheLockBack(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	rdb, prefix := newTestRedis(t)
	ctx := testContext(t)
	seedFive(t, pool)
	boards := storage.NewBoards(rdb, prefix, 100)
	down, err := pgxpool.New(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	down.Close() // PostgreSQL unreachable for this rebuild
	if _, err := boards.Rebuild(ctx, storage.NewRanks(down), global); err == nil {
		t.Fatal("a rebuild without PostgreSQL succeeded")
	}
	if keys := rdb.Keys(ctx, prefix+":*").Val(); len(keys) != 0 {
		t.Errorf("the failed rebuild left %v", keys)
	}
	res, err := boards.Rebuild(ctx, storage.NewRanks(pool), global)
	if err != nil || res.Entries != 5 {
		t.Fatalf("the retry: %+v, %v", res, err)
	}
}

// seedFive puts u1..u5 with scores 1..5 on global in PostgreSQL.
func seedFive(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(testContext(t), `
		INSERT INTO board_entries (board_id, period, user_id, score, sort_key, version, reached_at, updated_at)
		SELECT 'global', 'all_time', 'u' || i, i, i, 1, now(), now() FROM generate_series(1, 5) AS i`); err != nil {
		t.Fatal(err)
	}
}
