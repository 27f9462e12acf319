package handlers

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

var servers = storagetest.FromEnv(os.Getenv)

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
			ctx := context.Background()
			url := servers.NewDatabase(t)
			pool, err := storage.OpenPostgres(ctx, url, 8)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			if err := storage.Migrate(ctx, pool, storage.NewOutboxSchema(), 1); err != nil {
				t.Fatal(err)
			}
			rdb, prefix := servers.NewRedis(t)
			ranks := storage.NewRanks(pool)
			boards := storage.NewBoards(rdb, prefix, 10)
			apply := NewApplyScore(storage.NewProjection(pool), storage.Mirror{Boards: boards, Ranks: ranks}, nil, ApplyScoreConfig{Config: testConfig}, nil, slog.New(slog.DiscardHandler))
			defer apply.Close()
			submit := func(cmd messages.ScoreSubmitted) {
				t.Helper()
				cmd.Period, cmd.OccurredAt = "all_time", time.Now()
				payload, err := messages.EncodeScoreSubmitted(cmd)
				if err != nil {
					t.Fatal(err)
				}
				if err := apply.Handle(message.NewMessage(cmd.EventID, payload)); err != nil {
					t.Fatalf("apply %s: %v", cmd.EventID, err)
				}
			}
			submit(messages.ScoreSubmitted{EventID: "ev-1", Board: "global", UserID: "alice", NickName: "Alice", Value: 100})
			submit(messages.ScoreSubmitted{EventID: "ev-2", Board: "global", UserID: "bob", NickName: "Bob", Value: 50})
			keys, err := rdb.Keys(ctx, prefix+":*").Result()
			if err != nil || len(keys) == 0 {
				t.Fatalf("keys of %s: %v %v", prefix, keys, err)
			}
			if err := rdb.Del(ctx, keys...).Err(); err != nil { // Redis restarted empty
				t.Fatal(err)
			}
			reader := redis.NewClient(&redis.Options{Addr: servers.RedisAddr})
			defer reader.Close()
			reader.AddHook(&beforeLoadCall{page: c.page, f: func() {
				submit(messages.ScoreSubmitted{EventID: "ev-3", Board: "points", UserID: "alice", NickName: "Alicia", Value: 5})
			}})
			if _, err := (storage.Mirror{Boards: storage.NewBoards(reader, prefix, 10), Ranks: ranks}).Reload(ctx, storage.Target{Board: "global", Period: "all_time"}); err != nil {
				t.Fatalf("load on demand: %v", err)
			}
			var pg string
			if err := pool.QueryRow(ctx, `SELECT nick_name FROM users WHERE user_id = 'alice'`).Scan(&pg); err != nil || pg != "Alicia" {
				t.Fatalf("alice in PostgreSQL: %q %v (the rename did not run)", pg, err)
			}
			top, err := boards.Top(ctx, "global", "all_time", 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(top.Entries) != 2 || top.Entries[0].UserID != "alice" || top.Entries[0].NickName != "Alicia" || top.Entries[0].Score != 100 {
				t.Errorf("Redis's global top after the load: %+v, want alice first, named Alicia (as in PostgreSQL), 100", top.Entries)
			}
			if n, err := rdb.Exists(ctx, prefix+":{global}:all_time:renamed", prefix+":{global}:all_time:loading").Result(); err != nil || n != 0 {
				t.Errorf("after the load, %d of its hashes of loads and renames left (%v), want none", n, err)
			}
		})
	}
}

// beforeLoadCall runs f once, before the first script call of a load on demand that
// writes the global board's page (it names the removals' hash) or seals it (it does not),
// after the load began and read its page from PostgreSQL.
type beforeLoadCall struct {
	once sync.Once
	page bool
	f    func()
}

func (h *beforeLoadCall) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *beforeLoadCall) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *beforeLoadCall) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		var board, loading, gone bool
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok {
				board = board || strings.HasSuffix(s, ":{global}:all_time:z")
				loading = loading || strings.HasSuffix(s, ":{global}:all_time:loading")
				gone = gone || strings.HasSuffix(s, ":{global}:all_time:gone")
			}
		}
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && board && loading && gone == h.page {
			h.once.Do(h.f)
		}
		return next(ctx, cmd)
	}
}

// TestLateLoadPageKeepsARename: two loads on demand of the global board. The first read
// its page (alice named "Alice") before alice was renamed "Alicia"; the second, begun
// after the rename, loads and seals. The first's page reaches Redis only then, and the
// first load fails before its seal (its reader gave up). The page writes the name noted
// for the rename, not the one it read: the loaded board names her "Alicia".
func TestLateLoadPageKeepsARename(t *testing.T) {
	ctx := context.Background()
	url := servers.NewDatabase(t)
	pool, err := storage.OpenPostgres(ctx, url, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := storage.Migrate(ctx, pool, storage.NewOutboxSchema(), 1); err != nil {
		t.Fatal(err)
	}
	rdb, prefix := servers.NewRedis(t)
	ranks := storage.NewRanks(pool)
	boards := storage.NewBoards(rdb, prefix, 10)
	mirror := storage.Mirror{Boards: boards, Ranks: ranks}
	apply := NewApplyScore(storage.NewProjection(pool), mirror, nil, ApplyScoreConfig{Config: testConfig}, nil, slog.New(slog.DiscardHandler))
	defer apply.Close()
	submit := func(cmd messages.ScoreSubmitted) {
		t.Helper()
		cmd.Period, cmd.OccurredAt = "all_time", time.Now()
		payload, err := messages.EncodeScoreSubmitted(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if err := apply.Handle(message.NewMessage(cmd.EventID, payload)); err != nil {
			t.Fatalf("apply %s: %v", cmd.EventID, err)
		}
	}
	submit(messages.ScoreSubmitted{EventID: "ev-1", Board: "global", UserID: "alice", NickName: "Alice", Value: 100})
	keys, err := rdb.Keys(ctx, prefix+":*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of %s: %v %v", prefix, keys, err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil { // Redis restarted empty
		t.Fatal(err)
	}
	target := storage.Target{Board: "global", Period: "all_time"}
	stale := storage.EntryState{Board: "global", Period: "all_time", UserID: "alice", Score: 100, SortKey: 100, Version: 1, ReachedAt: time.Now(), UpdatedAt: time.Now()}
	calls := 0
	_, err = boards.Load(ctx, target, func() ([]storage.EntryState, map[string]string, error) {
		calls++
		if calls > 1 {
			return nil, nil, context.Canceled // the reader gave up before the seal
		}
		// The page was read; alice is renamed, and another load reads and seals the board.
		submit(messages.ScoreSubmitted{EventID: "ev-2", Board: "points", UserID: "alice", NickName: "Alicia", Value: 5})
		if _, err := mirror.Reload(ctx, target); err != nil {
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
	ctx := context.Background()
	url := servers.NewDatabase(t)
	pool, err := storage.OpenPostgres(ctx, url, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := storage.Migrate(ctx, pool, storage.NewOutboxSchema(), 1); err != nil {
		t.Fatal(err)
	}
	rdb, prefix := servers.NewRedis(t)
	ranks := storage.NewRanks(pool)
	boards := storage.NewBoards(rdb, prefix, 10)
	apply := NewApplyScore(storage.NewProjection(pool), storage.Mirror{Boards: boards, Ranks: ranks}, nil, ApplyScoreConfig{Config: testConfig}, nil, slog.New(slog.DiscardHandler))
	defer apply.Close()
	submit := func(cmd messages.ScoreSubmitted) {
		t.Helper()
		cmd.Period, cmd.OccurredAt = "all_time", time.Now()
		payload, err := messages.EncodeScoreSubmitted(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if err := apply.Handle(message.NewMessage(cmd.EventID, payload)); err != nil {
			t.Fatalf("apply %s: %v", cmd.EventID, err)
		}
	}
	submit(messages.ScoreSubmitted{EventID: "ev-1", Board: "global", UserID: "alice", NickName: "Alice", Value: 100})
	submit(messages.ScoreSubmitted{EventID: "ev-2", Board: "points", UserID: "alice", NickName: "Alice", Value: 1})
	admin := redis.NewClient(&redis.Options{Addr: servers.RedisAddr})
	defer admin.Close()
	admin.AddHook(&beforeShadowPage{f: func() {
		submit(messages.ScoreSubmitted{EventID: "ev-3", Board: "points", UserID: "alice", NickName: "Alicia", Value: 5})
	}})
	if _, err := storage.NewBoards(admin, prefix, 10).Rebuild(ctx, ranks, storage.Target{Board: "global", Period: "all_time"}); err != nil {
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

// beforeShadowPage runs f once, before a rebuild writes its first page into the shadow
// keys (the first script call naming the shadow's removals), after it read the page.
type beforeShadowPage struct {
	once sync.Once
	f    func()
}

func (h *beforeShadowPage) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *beforeShadowPage) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *beforeShadowPage) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasSuffix(s, ":{global}:all_time:gone~") && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
				h.once.Do(h.f)
				break
			}
		}
		return next(ctx, cmd)
	}
}
