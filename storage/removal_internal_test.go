package storage

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

// Removals (and bans) that land while a board period is loaded into Redis: the load may
// have read the entry from PostgreSQL before it was removed, and must not bring it back.
// These tests run the load's own code path with a hook between its pages.

var loadRaceGlobal = Target{Board: "global", Period: "all_time"}

type loadRace struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	rdb  *redis.Client
	b    *Boards
	r    *Ranks
}

func newLoadRace(t *testing.T) *loadRace {
	t.Parallel()
	servers := storagetest.FromEnv(os.Getenv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, servers.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := Migrate(ctx, pool, NewOutboxSchema(), 1); err != nil {
		t.Fatal(err)
	}
	rdb, prefix := servers.NewRedis(t)
	return &loadRace{t: t, ctx: ctx, pool: pool, rdb: rdb, b: NewBoards(rdb, prefix, 10), r: NewRanks(pool)}
}

// aliceAndBob gives the board two entries in PostgreSQL, alice 100 and bob 90 (version 1).
func (f *loadRace) aliceAndBob() *loadRace {
	f.set("alice", 100, 1)
	f.set("bob", 90, 1)
	return f
}

// set writes an entry in PostgreSQL as the projector's transaction does and returns the
// state the projector then mirrors.
func (f *loadRace) set(user string, score, version int64) EntryState {
	f.t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO board_entries (board_id, period, user_id, score, sort_key, version, reached_at, updated_at)
		VALUES ('global', 'all_time', $1, $2, $2, $3, $4, $4)
		ON CONFLICT (board_id, period, user_id) DO UPDATE SET score = $2, sort_key = $2, version = $3, reached_at = $4, updated_at = $4`,
		user, score, version, now); err != nil {
		f.t.Fatal(err)
	}
	return EntryState{Board: "global", Period: "all_time", UserID: user, Score: score, SortKey: score, Version: version, ReachedAt: now, UpdatedAt: now}
}

// remove deletes an entry in PostgreSQL as the projector's removal does and returns the
// state it mirrors.
func (f *loadRace) remove(user string, version int64) EntryState {
	f.t.Helper()
	if _, err := f.pool.Exec(f.ctx, `DELETE FROM board_entries WHERE board_id = 'global' AND period = 'all_time' AND user_id = $1`, user); err != nil {
		f.t.Fatal(err)
	}
	return EntryState{Board: "global", Period: "all_time", UserID: user, Version: version, Removed: true}
}

// mirror does what the projector does after its commit: Apply, and on ErrNotLoaded a
// Reload of its own.
func (f *loadRace) mirror(states ...EntryState) {
	f.t.Helper()
	_, _, err := f.b.Apply(f.ctx, loadRaceGlobal, states, nil)
	if errors.Is(err, ErrNotLoaded) {
		_, err = f.b.Reload(f.ctx, f.r, loadRaceGlobal)
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// reload is Boards.Reload with hook run after the page'th read from PostgreSQL (before
// that page is written to Redis) or, with afterWrite, before the page'th read (the pages
// before it written, the seal not run).
func (f *loadRace) reload(page int, afterWrite bool, hook func()) {
	f.t.Helper()
	next := f.r.pages(f.ctx, "global", "all_time", 2000)
	calls := 0
	hooked := func() ([]EntryState, map[string]string, error) {
		calls++
		if afterWrite && calls == page {
			hook()
		}
		s, n, err := next()
		if !afterWrite && calls == page {
			hook()
		}
		return s, n, err
	}
	if _, err := f.b.load(f.ctx, loadRaceGlobal, hooked, 0); err != nil {
		f.t.Fatal(err)
	}
}

func (f *loadRace) consistent(what string) {
	f.t.Helper()
	rep, err := f.b.CheckConsistency(f.ctx, f.r, "global", "all_time", true, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	if !rep.Consistent {
		f.t.Errorf("%s: Redis differs from PostgreSQL: %+v", what, rep)
	}
}

// TestRemovalDuringLoadStaysRemoved: a load has written alice's page, not sealed; alice is
// removed, and the projector finds the board not loaded.
func TestRemovalDuringLoadStaysRemoved(t *testing.T) {
	f := newLoadRace(t).aliceAndBob()
	f.reload(2, true, func() { f.mirror(f.remove("alice", 2)) })
	f.consistent("a removal after the load wrote the entry")
}

// TestRemovalBeforeLoadWritesStaysRemoved: the load has read alice's page but not written
// it when she is removed.
func TestRemovalBeforeLoadWritesStaysRemoved(t *testing.T) {
	f := newLoadRace(t).aliceAndBob()
	f.reload(1, false, func() { f.mirror(f.remove("alice", 2)) })
	f.consistent("a removal between the load's read and its write")
}

// TestBanDuringLoadStaysHidden: the same with a ban (a hidden entry is mirrored as a state
// without a record).
func TestBanDuringLoadStaysHidden(t *testing.T) {
	f := newLoadRace(t).aliceAndBob()
	f.reload(1, false, func() {
		if _, err := f.pool.Exec(f.ctx, `UPDATE board_entries SET hidden = true, version = 2 WHERE user_id = 'alice'`); err != nil {
			t.Fatal(err)
		}
		f.mirror(EntryState{Board: "global", Period: "all_time", UserID: "alice", Score: 100, SortKey: 100, Version: 2, Hidden: true})
	})
	f.consistent("a ban between the load's read and its write")
}

// TestNewEntryAfterRemovalDuringLoad: alice (version 5) is removed and scores again (a new
// entry, version 7 since versions continue past a removal) between the load's read and
// its write: the new entry stays.
func TestNewEntryAfterRemovalDuringLoad(t *testing.T) {
	f := newLoadRace(t)
	f.set("alice", 100, 5)
	f.set("bob", 90, 1)
	f.reload(1, false, func() {
		f.mirror(f.remove("alice", 6))
		f.mirror(f.set("alice", 10, 7))
	})
	f.consistent("a removal and a new entry during a load")
	if e, err := f.b.User(f.ctx, "global", "all_time", "alice"); err != nil || e.Score != 10 {
		t.Errorf("alice: %+v, %v; want her new entry, 10", e, err)
	}
}

// TestRemovalWhileNotLoadedReachesLeftKeys: the board's top is gone (it expires a second
// before the entries) when alice is removed: the load that follows writes over the keys
// left, and alice must not stay among them.
func TestRemovalWhileNotLoadedReachesLeftKeys(t *testing.T) {
	f := newLoadRace(t).aliceAndBob()
	if _, err := f.b.Reload(f.ctx, f.r, loadRaceGlobal); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.Del(f.ctx, f.b.keys("global", "all_time").top).Err(); err != nil {
		t.Fatal(err)
	}
	f.mirror(f.remove("alice", 2))
	f.consistent("a removal while the board was not loaded")
}

// TestDelayedWriteAfterRemovalStaysOut: a state older than the entry's removal, mirrored
// after it (a slow batch), does not bring the entry back.
func TestDelayedWriteAfterRemovalStaysOut(t *testing.T) {
	f := newLoadRace(t)
	old := f.set("alice", 100, 1)
	f.set("bob", 90, 1)
	if _, err := f.b.Reload(f.ctx, f.r, loadRaceGlobal); err != nil {
		t.Fatal(err)
	}
	f.mirror(f.remove("alice", 2))
	f.mirror(old)
	f.consistent("a state older than the removal, mirrored after it")
}

// TestRemovalDuringRebuildStaysRemoved: Boards.Rebuild step by step, alice removed between
// the shadow's read of her page and its write (the shadow has no alice yet).
func TestRemovalDuringRebuildStaysRemoved(t *testing.T) {
	f := newLoadRace(t).aliceAndBob()
	if _, err := f.b.Reload(f.ctx, f.r, loadRaceGlobal); err != nil {
		t.Fatal(err)
	}
	k := f.b.keys("global", "all_time")
	if err := f.rdb.Set(f.ctx, k.rebuild, "token", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := dropScript.Run(f.ctx, f.rdb, []string{k.zs, k.us, k.ns, k.ms}).Err(); err != nil {
		t.Fatal(err)
	}
	next := f.r.pages(f.ctx, "global", "all_time", 2000)
	calls := 0
	hooked := func() ([]EntryState, map[string]string, error) {
		s, n, err := next()
		if calls++; calls == 1 {
			f.mirror(f.remove("alice", 2))
		}
		return s, n, err
	}
	if _, err := f.b.loadPages(f.ctx, []string{k.zs, k.us, k.ns, k.ms, k.goneS, k.top, k.ver, k.loading, k.renamed}, hooked, 2, 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := swapScript.Run(f.ctx, f.rdb, []string{k.z, k.u, k.n, k.m, k.top, k.rebuild, k.zs, k.us, k.ns, k.ms, k.ver, k.loading, k.renamed},
		f.b.topN, time.Now().UnixMicro(), "token", 0).Err(); err != nil {
		t.Fatal(err)
	}
	f.consistent("a removal during a rebuild")
}

// TestLoadExtendsKeysAboutToExpire: a load of a period whose keys are about to expire (its
// top went a second before them) gives them a new lifetime with its first page, or they
// could vanish between its pages and its seal, which would mark the board loaded with
// entries missing.
func TestLoadExtendsKeysAboutToExpire(t *testing.T) {
	f := newLoadRace(t)
	match := Target{Board: "global", Period: "all_time", TTL: time.Hour}
	f.set("alice", 100, 1)
	f.set("bob", 90, 1)
	if _, err := f.b.Reload(f.ctx, f.r, match); err != nil {
		t.Fatal(err)
	}
	k := f.b.keys("global", "all_time")
	for _, key := range []string{k.z, k.u} {
		if err := f.rdb.PExpire(f.ctx, key, 2*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.rdb.Del(f.ctx, k.top).Err(); err != nil {
		t.Fatal(err)
	}
	next := f.r.pages(f.ctx, "global", "all_time", 1) // a page an entry
	calls := 0
	hooked := func() ([]EntryState, map[string]string, error) {
		if calls++; calls == 2 {
			for _, key := range []string{k.z, k.u} {
				if ttl := f.rdb.PTTL(f.ctx, key).Val(); ttl < 59*time.Minute {
					t.Errorf("after the load's first page %s lives %v, want about an hour", key, ttl)
				}
			}
		}
		return next()
	}
	if _, err := f.b.load(f.ctx, match, hooked, 0); err != nil {
		t.Fatal(err)
	}
	f.consistent("a load of keys about to expire")
}
