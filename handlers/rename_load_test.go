package handlers

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

var servers = storagetest.FromEnv(os.Getenv)

// renameFixture is a migrated database and a Redis prefix of its own, with a projector
// applying commands to them (submit).
type renameFixture struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	rdb    *redis.Client
	prefix string
	ranks  *storage.Ranks
	boards *storage.Boards
	apply  *ApplyScore
	t      *testing.T
}

func newRenameFixture(t *testing.T) *renameFixture {
	t.Helper()
	f := &renameFixture{ctx: context.Background()}
	pool, err := storage.OpenPostgres(f.ctx, servers.NewDatabase(t), 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := storage.Migrate(f.ctx, pool, storage.NewOutboxSchema(), 1); err != nil {
		t.Fatal(err)
	}
	f.pool = pool
	f.rdb, f.prefix = servers.NewRedis(t)
	f.ranks, f.boards = storage.NewRanks(pool), storage.NewBoards(f.rdb, f.prefix, 10)
	f.apply = NewApplyScore(storage.NewProjection(pool), storage.Mirror{Boards: f.boards, Ranks: f.ranks}, nil, ApplyScoreConfig{Config: testConfig}, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(f.apply.Close)
	f.t = t
	return f
}

// submit applies one command of the all_time period, accepted now.
func (f *renameFixture) submit(cmd messages.ScoreSubmitted) {
	f.t.Helper()
	cmd.Period, cmd.OccurredAt = "all_time", time.Now()
	payload, err := messages.EncodeScoreSubmitted(cmd)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.apply.Handle(message.NewMessage(cmd.EventID, payload)); err != nil {
		f.t.Fatalf("apply %s: %v", cmd.EventID, err)
	}
}

// dropRedis deletes every key of the fixture's prefix: Redis restarted empty.
func (f *renameFixture) dropRedis() {
	f.t.Helper()
	keys, err := f.rdb.Keys(f.ctx, f.prefix+":*").Result()
	if err != nil || len(keys) == 0 {
		f.t.Fatalf("keys of %s: %v %v", f.prefix, keys, err)
	}
	if err := f.rdb.Del(f.ctx, keys...).Err(); err != nil {
		f.t.Fatal(err)
	}
}

// TestRenameDuringALoadOnDemandIsKept: Redis lost the global board (restarted empty). A
// reader loads it on demand from PostgreSQL, where alice is named "Alice". Meanwhile a
// command of alice's on another board renames her "Alicia"; the projector applies it and
// leaves the global period alone (not loaded: a load reads it). The load's page was read
// before the rename, so it brings "Alice": written as it was, Redis's global top showed
// "Alice" for good while PostgreSQL said "Alicia" (found by a review). The rename comes
// after the page was read and before it reaches Redis, or after the last page and before
// the seal: either way the loaded board names her "Alicia".
func TestRenameDuringALoadOnDemandIsKept(t *testing.T) {
	for _, c := range []struct {
		name string
		page bool // the load's script call before which alice is renamed: its page, or its seal
	}{{"before the page reaches Redis", true}, {"before the seal", false}} {
		t.Run(c.name, func(t *testing.T) {
			f := newRenameFixture(t)
			f.submit(messages.ScoreSubmitted{EventID: "ev-1", Board: "global", UserID: "alice", NickName: "Alice", Value: 100})
			f.submit(messages.ScoreSubmitted{EventID: "ev-2", Board: "global", UserID: "bob", NickName: "Bob", Value: 50})
			f.dropRedis()
			reader := redis.NewClient(&redis.Options{Addr: servers.RedisAddr})
			defer reader.Close()
			hook := &beforeScript{with: []string{"z", "loading", "gone"}}
			if !c.page {
				hook = &beforeScript{with: []string{"z", "loading"}, never: []string{"gone"}}
			}
			hook.f = func() {
				f.submit(messages.ScoreSubmitted{EventID: "ev-3", Board: "points", UserID: "alice", NickName: "Alicia", Value: 5})
			}
			reader.AddHook(hook)
			if _, err := (storage.Mirror{Boards: storage.NewBoards(reader, f.prefix, 10), Ranks: f.ranks}).Reload(f.ctx, storage.Target{Board: "global", Period: "all_time"}); err != nil {
				t.Fatalf("load on demand: %v", err)
			}
			var pg string
			if err := f.pool.QueryRow(f.ctx, `SELECT nick_name FROM users WHERE user_id = 'alice'`).Scan(&pg); err != nil || pg != "Alicia" {
				t.Fatalf("alice in PostgreSQL: %q %v (the rename did not run)", pg, err)
			}
			top, err := f.boards.Top(f.ctx, "global", "all_time", 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(top.Entries) != 2 || top.Entries[0].UserID != "alice" || top.Entries[0].NickName != "Alicia" || top.Entries[0].Score != 100 {
				t.Errorf("Redis's global top after the load: %+v, want alice first, named Alicia (as in PostgreSQL), 100", top.Entries)
			}
			if n, err := f.rdb.Exists(f.ctx, f.prefix+":{global}:all_time:renamed", f.prefix+":{global}:all_time:loading").Result(); err != nil || n != 0 {
				t.Errorf("after the load, %d of its hashes of loads and renames left (%v), want none", n, err)
			}
		})
	}
}

// TestLateLoadPageKeepsARename: two loads on demand of the global board. The first read
// its page (alice named "Alice") before alice was renamed "Alicia"; the second, begun
// after the rename, loads and seals. The first's page reaches Redis only then, and the
// first load fails before its seal (its reader gave up). The page writes the name noted
// for the rename, not the one it read: the loaded board names her "Alicia".
func TestLateLoadPageKeepsARename(t *testing.T) {
	f := newRenameFixture(t)
	ctx, boards, rdb, prefix := f.ctx, f.boards, f.rdb, f.prefix
	f.submit(messages.ScoreSubmitted{EventID: "ev-1", Board: "global", UserID: "alice", NickName: "Alice", Value: 100})
	f.dropRedis()
	target := storage.Target{Board: "global", Period: "all_time"}
	stale := storage.EntryState{Board: "global", Period: "all_time", UserID: "alice", Score: 100, SortKey: 100, Version: 1, ReachedAt: time.Now(), UpdatedAt: time.Now()}
	calls := 0
	_, err := boards.Load(ctx, target, func() ([]storage.EntryState, map[string]string, error) {
		calls++
		if calls > 1 {
			return nil, nil, context.Canceled // the reader gave up before the seal
		}
		// The page was read; alice is renamed, and another load reads and seals the board.
		f.submit(messages.ScoreSubmitted{EventID: "ev-2", Board: "points", UserID: "alice", NickName: "Alicia", Value: 5})
		if _, err := (storage.Mirror{Boards: boards, Ranks: f.ranks}).Reload(ctx, target); err != nil {
			t.Fatalf("the second load: %v", err)
		}
		return []storage.EntryState{stale}, map[string]string{"alice": "Alice"}, nil
	})
	if err == nil {
		t.Fatal("the first load sealed; want it to fail after its page")
	}
	// The cached top was computed at the second load's seal; pages and the next top read
	// the names' hash.
	if nick, err := rdb.HGet(ctx, prefix+":{global}:all_time:n", "alice").Result(); err != nil || nick != "Alicia" {
		t.Errorf("Redis's name of alice on the global board after the late page: %q %v, want Alicia (as in PostgreSQL)", nick, err)
	}
	page, err := boards.Page(ctx, "global", "all_time", nil, 10)
	if err != nil || len(page) != 1 || page[0].NickName != "Alicia" {
		t.Errorf("Redis's first page of the global board after the late page: %+v %v, want alice named Alicia", page, err)
	}
}

// TestRenameDuringARebuildIsKept: an admin rebuilds the global board while alice is
// renamed "Alicia": the rebuild read her page ("Alice") from PostgreSQL before the rename
// committed and writes it into its shadow after the projector wrote the new name there.
// The page takes the name noted for the rename, and the swapped-in board names her
// "Alicia" (it named her "Alice" until her next rename; found by a review).
func TestRenameDuringARebuildIsKept(t *testing.T) {
	f := newRenameFixture(t)
	ctx, boards, rdb, prefix := f.ctx, f.boards, f.rdb, f.prefix
	f.submit(messages.ScoreSubmitted{EventID: "ev-1", Board: "global", UserID: "alice", NickName: "Alice", Value: 100})
	f.submit(messages.ScoreSubmitted{EventID: "ev-2", Board: "points", UserID: "alice", NickName: "Alice", Value: 1})
	admin := redis.NewClient(&redis.Options{Addr: servers.RedisAddr})
	defer admin.Close()
	admin.AddHook(&beforeScript{with: []string{"gone~"}, f: func() {
		f.submit(messages.ScoreSubmitted{EventID: "ev-3", Board: "points", UserID: "alice", NickName: "Alicia", Value: 5})
	}})
	if _, err := storage.NewBoards(admin, prefix, 10).Rebuild(ctx, f.ranks, storage.Target{Board: "global", Period: "all_time"}); err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	if nick, err := rdb.HGet(ctx, prefix+":{global}:all_time:n", "alice").Result(); err != nil || nick != "Alicia" {
		t.Errorf("alice's name on the rebuilt global board: %q %v, want Alicia (as in PostgreSQL)", nick, err)
	}
	top, err := boards.Top(ctx, "global", "all_time", 10)
	if err != nil || len(top.Entries) != 1 || top.Entries[0].NickName != "Alicia" {
		t.Errorf("the rebuilt global board's top: %+v %v, want alice named Alicia", top.Entries, err)
	}
	if n, err := rdb.Exists(ctx, prefix+":{global}:all_time:renamed").Result(); err != nil || n != 0 {
		t.Errorf("after the rebuild, the renames it noted are left (%d, %v)", n, err)
	}
}

// beforeScript runs f once, before the first script call (EVALSHA or EVAL) that names
// keys of the global board's all_time period with the given endings: a load's page (z,
// loading and gone), its seal (z and loading, not gone), a rebuild's page (gone~).
type beforeScript struct {
	once        sync.Once
	with, never []string
	f           func()
}

func (h *beforeScript) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *beforeScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *beforeScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			names := func(end string) bool {
				return slices.ContainsFunc(cmd.Args(), func(a any) bool {
					s, ok := a.(string)
					return ok && strings.HasSuffix(s, ":{global}:all_time:"+end)
				})
			}
			if !slices.ContainsFunc(h.with, func(e string) bool { return !names(e) }) && !slices.ContainsFunc(h.never, names) {
				h.once.Do(h.f)
			}
		}
		return next(ctx, cmd)
	}
}
