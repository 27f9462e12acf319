package storage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/openleaderboard/leaderboard/storage"
)

// newTestPipe is a test's Redis (its keys under prefix, deleted after it) and a pipe on it,
// closed after the test.
func newTestPipe(t *testing.T) (*redis.Client, string, *storage.Pipe) {
	t.Helper()
	rdb, prefix := servers.NewRedis(t)
	pipe := storage.NewPipe(rdb, 2*time.Second, 0)
	t.Cleanup(pipe.Close)
	return rdb, prefix, pipe
}

// TestPipeAnswersEachCommand: concurrent commands sharing pipelines each get their own
// answer; a command Redis refuses fails alone; value reads through the pipe see what the
// board holds (and nothing for a user without an entry); a closed pipe refuses work.
func TestPipeAnswersEachCommand(t *testing.T) {
	ctx := context.Background()
	rdb, prefix, pipe := newTestPipe(t)
	if err := rdb.Set(ctx, prefix+":pipe:string", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	const n = 300 // more than one pipeline's worth
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%50 == 0 { // HGET on a string: WRONGTYPE, for this command only
				cmd := redis.NewStringCmd(ctx, "hget", prefix+":pipe:string", "f")
				if _, err := pipe.Go(ctx, cmd).Wait(ctx); err != nil {
					t.Error(err)
				} else if err := cmd.Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
					t.Errorf("HGET on a string answered %q, %v; want WRONGTYPE", cmd.Val(), cmd.Err())
				}
				return
			}
			want := fmt.Sprintf("echo-%d", i)
			cmd := redis.NewStringCmd(ctx, "echo", want)
			if _, err := pipe.Go(ctx, cmd).Wait(ctx); err != nil {
				t.Error(err)
			} else if got, err := cmd.Result(); err != nil || got != want {
				t.Errorf("command %d answered %q, %v; want %q", i, got, err, want)
			}
		}()
	}
	wg.Wait()

	boards := storage.NewBoards(rdb, prefix, 10)
	loadValues(t, boards, "global", map[string]int64{"alice": 42})
	values := storage.NewValueReader(boards, pipe)
	alice := values.Read(ctx, storage.ValueKey{Board: "global", Period: "all_time", UserID: "alice"})
	bob := values.Read(ctx, storage.ValueKey{Board: "global", Period: "all_time", UserID: "bob"})
	if v, err := alice.Wait(ctx); err != nil || v != (storage.Value{Score: 42, OK: true}) {
		t.Fatalf("alice's value = %+v, %v; want 42", v, err)
	}
	if v, err := bob.Wait(ctx); err != nil || v.OK {
		t.Fatalf("bob's value = %+v, %v; want none", v, err)
	}
	// Redis forgot its scripts (a restart): the read loads the script again.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := values.Read(ctx, storage.ValueKey{Board: "global", Period: "all_time", UserID: "alice"}).Wait(ctx); err != nil || v != (storage.Value{Score: 42, OK: true}) {
		t.Fatalf("after SCRIPT FLUSH alice's value = %+v, %v; want 42", v, err)
	}

	pipe.Close()
	if _, err := pipe.Go(ctx, redis.NewStringCmd(ctx, "echo", "late")).Wait(ctx); !errors.Is(err, storage.ErrBatcherClosed) {
		t.Fatalf("a closed pipe answered %v, want ErrBatcherClosed", err)
	}
}

// TestTopThroughPipeFollowsChanges: tops read through a pipe (parsed once per version)
// show every change of the top, each limit cut from the same top, and a period Redis no
// longer holds is not loaded.
func TestTopThroughPipeFollowsChanges(t *testing.T) {
	ctx := context.Background()
	rdb, prefix, pipe := newTestPipe(t)
	writer := storage.NewBoards(rdb, prefix, 10)
	reader := storage.NewBoards(rdb, prefix, 10).WithPipe(pipe)
	target := storage.Target{Board: "global", Period: "all_time"}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	entry := func(user string, score int64) storage.EntryState {
		return storage.EntryState{Board: "global", Period: "all_time", UserID: user, Score: score, SortKey: score, Version: 1, ReachedAt: at, UpdatedAt: at}
	}
	loaded := false
	if _, err := writer.Load(ctx, target, func() ([]storage.EntryState, map[string]string, error) {
		if loaded {
			return nil, nil, nil
		}
		loaded = true
		return []storage.EntryState{entry("alice", 42)}, nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	users := func(limit int) string {
		t.Helper()
		top, err := reader.Top(ctx, "global", "all_time", limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range top.Entries {
			out = append(out, fmt.Sprintf("%s:%d", e.UserID, e.Score))
		}
		return strings.Join(out, " ")
	}
	if got := users(10); got != "alice:42" {
		t.Fatalf("top = %q", got)
	}
	for _, change := range []struct {
		state storage.EntryState
		want  string
	}{
		{entry("bob", 50), "bob:50 alice:42"},
		{entry("carol", 45), "bob:50 carol:45 alice:42"},
		{storage.EntryState{Board: "global", Period: "all_time", UserID: "alice", Score: 60, SortKey: 60, Version: 2, ReachedAt: at, UpdatedAt: at}, "alice:60 bob:50 carol:45"},
	} {
		if _, _, err := writer.Apply(ctx, target, []storage.EntryState{change.state}, nil); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second read finds the top unchanged
			if got := users(10); got != change.want {
				t.Fatalf("after %s: top = %q, want %q", change.state.UserID, got, change.want)
			}
		}
		if got := users(1); got != strings.Fields(change.want)[0] {
			t.Fatalf("after %s: top 1 = %q", change.state.UserID, got)
		}
	}
	if err := rdb.Del(ctx, prefix+":{global}:all_time:top").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Top(ctx, "global", "all_time", 10); !errors.Is(err, storage.ErrNotLoaded) {
		t.Fatalf("a top Redis lost: %v, want ErrNotLoaded", err)
	}
}

// loadValues loads board's all_time period into Redis with the users' values.
func loadValues(t *testing.T, boards *storage.Boards, board string, values map[string]int64) {
	t.Helper()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var page []storage.EntryState
	for u, v := range values {
		page = append(page, storage.EntryState{Board: board, Period: "all_time", UserID: u, Score: v, SortKey: v, Version: 1, ReachedAt: at, UpdatedAt: at})
	}
	pages := [][]storage.EntryState{page}
	if _, err := boards.Load(context.Background(), storage.Target{Board: board, Period: "all_time"}, func() ([]storage.EntryState, map[string]string, error) {
		if len(pages) == 0 {
			return nil, nil, nil
		}
		p := pages[0]
		pages = pages[1:]
		return p, nil, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// pipelines records the commands (their arguments) of every pipeline a client sends.
type pipelines struct {
	mu   sync.Mutex
	sent [][][]any
}

func (h *pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		args := make([][]any, len(cmds))
		for i, c := range cmds {
			args[i] = c.Args()
		}
		h.mu.Lock()
		h.sent = append(h.sent, args)
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns the pipelines sent since the last take whose first command is name (""
// any: name leaves out the client's own, such as a new connection's HELLO).
func (h *pipelines) take(name string) [][][]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out [][][]any
	for _, p := range h.sent {
		if name == "" || len(p) > 0 && p[0][0] == name {
			out = append(out, p)
		}
	}
	h.sent = nil
	return out
}

// TestLingeringPipeGathersCommands: a pipe with a linger sends the commands that come
// while its first waits in one pipeline; without one, a lone command goes at once.
func TestLingeringPipeGathersCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb, _ := servers.NewRedis(t)
	hook := &pipelines{}
	rdb.AddHook(hook)

	lingering := storage.NewPipe(rdb, 2*time.Second, time.Hour)
	var sent []*redis.StringCmd
	var waits []storage.Pending[struct{}]
	for i := range 3 {
		cmd := redis.NewStringCmd(ctx, "echo", fmt.Sprint(i))
		sent = append(sent, cmd)
		waits = append(waits, lingering.Go(ctx, cmd))
		if i == 0 {
			time.Sleep(100 * time.Millisecond) // the first is taken (without a linger: sent) by now
		}
	}
	lingering.Close() // the hour is not waited out: Close hands the batch over
	for i, w := range waits {
		if _, err := w.Wait(ctx); err != nil || sent[i].Val() != fmt.Sprint(i) {
			t.Fatalf("command %d: %v, %q", i, err, sent[i].Val())
		}
	}
	var sizes []int
	for _, p := range hook.take("echo") {
		sizes = append(sizes, len(p))
	}
	if got := fmt.Sprint(sizes); got != "[3]" {
		t.Errorf("pipelines %s, want [3]: one round trip", got)
	}

	prompt := storage.NewPipe(rdb, 2*time.Second, 0)
	defer prompt.Close()
	cmd := redis.NewStringCmd(ctx, "echo", "now")
	if _, err := prompt.Go(ctx, cmd).Wait(ctx); err != nil || cmd.Val() != "now" {
		t.Fatalf("a lone command without a linger: %v, %q", err, cmd.Val())
	}
}

// TestValueReadsOfOneBoardShareAScriptCall: the value reads one pipeline carries for the
// same board period go to Redis as one script call, and each read still gets its own
// user's value; other commands and other boards' reads are left as they are; when Redis
// has lost the script, every read of the call loads it again.
func TestValueReadsOfOneBoardShareAScriptCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb, prefix := servers.NewRedis(t)
	boards := storage.NewBoards(rdb, prefix, 10)
	loadValues(t, boards, "global", map[string]int64{"alice": 42, "carol": 7})
	loadValues(t, boards, "points", map[string]int64{"alice": 3})
	hook := &pipelines{}
	rdb.AddHook(hook)

	for _, flushed := range []bool{false, true} {
		if flushed { // Redis forgot its scripts (a restart): each read loads it again
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		hook.take("")
		pipe := storage.NewPipe(rdb, 2*time.Second, time.Hour)
		values := storage.NewValueReader(boards, pipe)
		type read struct {
			key  storage.ValueKey
			want storage.Value
		}
		reads := []read{
			{storage.ValueKey{Board: "global", Period: "all_time", UserID: "alice"}, storage.Value{Score: 42, OK: true}},
			{storage.ValueKey{Board: "points", Period: "all_time", UserID: "alice"}, storage.Value{Score: 3, OK: true}},
			{storage.ValueKey{Board: "global", Period: "all_time", UserID: "bob"}, storage.Value{}},
			{storage.ValueKey{Board: "global", Period: "all_time", UserID: "carol"}, storage.Value{Score: 7, OK: true}},
		}
		var pending []storage.ValueRead
		for i, r := range reads {
			pending = append(pending, values.Read(ctx, r.key))
			if i == 0 {
				time.Sleep(100 * time.Millisecond) // the first is taken by now; the rest gather behind it
			}
		}
		echo := redis.NewStringCmd(ctx, "echo", "x")
		echoed := pipe.Go(ctx, echo)
		pipe.Close() // hands the gathered batch over at once
		for i, p := range pending {
			if v, err := p.Wait(ctx); err != nil || v != reads[i].want {
				t.Errorf("script flushed %v: read %+v = %+v, %v; want %+v", flushed, reads[i].key, v, err, reads[i].want)
			}
		}
		if _, err := echoed.Wait(ctx); err != nil || echo.Val() != "x" {
			t.Errorf("echo beside the reads: %v, %q", err, echo.Val())
		}
		if flushed {
			continue
		}
		var calls []string
		for _, p := range hook.take("") {
			for _, args := range p {
				if args[0] == "evalsha" {
					calls = append(calls, fmt.Sprint(args[6:]))
				}
			}
		}
		if got := fmt.Sprint(calls); got != "[[alice bob carol] [alice]]" {
			t.Errorf("script calls sent %s, want [[alice bob carol] [alice]]: one call per board period", got)
		}
	}
}

// TestHeldEntryReadsAsNoValue: a user an admin's command holds (Hold) reads as having no
// value on the write path, alone and in a script call shared with other reads of the board
// period, until the hold of that command is released; a release for another command leaves
// it held. Reads of the board (the user's rank) still show the entry.
func TestHeldEntryReadsAsNoValue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb, prefix := servers.NewRedis(t)
	boards := storage.NewBoards(rdb, prefix, 10)
	loadValues(t, boards, "global", map[string]int64{"alice": 42, "bob": 7})
	pipe := storage.NewPipe(rdb, time.Second, 5*time.Millisecond)
	t.Cleanup(pipe.Close)
	values := storage.NewValueReader(boards, pipe)
	read := func(users ...string) string {
		t.Helper()
		pending := make([]storage.ValueRead, len(users))
		for i, u := range users {
			pending[i] = values.Read(ctx, storage.ValueKey{Board: "global", Period: "all_time", UserID: u})
		}
		var out []string
		for i, p := range pending {
			v, err := p.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s:%v:%d", users[i], v.OK, v.Score))
		}
		return strings.Join(out, " ")
	}
	if got := read("alice", "bob"); got != "alice:true:42 bob:true:7" {
		t.Fatalf("before the hold: %s", got)
	}
	if _, err := boards.Hold(ctx, "global", "all_time", "alice", "rm-1"); err != nil {
		t.Fatal(err)
	}
	if got := read("alice", "bob"); got != "alice:false:0 bob:true:7" {
		t.Errorf("held, read with another user's: %s", got)
	}
	if got := read("alice"); got != "alice:false:0" {
		t.Errorf("held, read alone: %s", got)
	}
	if e, err := boards.User(ctx, "global", "all_time", "alice"); err != nil || e.Score != 42 || e.Rank != 1 {
		t.Errorf("the board's read of a held user: %+v, %v", e, err)
	}
	if err := boards.Unhold(ctx, "global", "all_time", "alice", "adj-0"); err != nil {
		t.Fatal(err)
	}
	if got := read("alice"); got != "alice:false:0" {
		t.Errorf("released for another command: %s", got)
	}
	if err := boards.Unhold(ctx, "global", "all_time", "alice", "rm-1"); err != nil {
		t.Fatal(err)
	}
	if got := read("alice", "bob"); got != "alice:true:42 bob:true:7" {
		t.Errorf("released: %s", got)
	}

	// A user is held while any admin command is on its way: each takes its own id out,
	// applied or not accepted after all, whatever order they come in. Hold says whether
	// the id was new (a retry of a command still on its way finds it there).
	hold := func(id string, wantAdded bool) {
		t.Helper()
		if added, err := boards.Hold(ctx, "global", "all_time", "alice", id); err != nil || added != wantAdded {
			t.Fatalf("Hold(%s) = %v, %v; want added %v", id, added, err, wantAdded)
		}
	}
	unhold := func(id string) {
		t.Helper()
		if err := boards.Unhold(ctx, "global", "all_time", "alice", id); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what, want string) {
		t.Helper()
		if got := read("alice"); got != want {
			held, _ := rdb.HGetAll(ctx, prefix+":{global}:all_time:held").Result()
			t.Errorf("%s: %s, want %s (held: %v)", what, got, want, held)
		}
	}
	hold("adj-a", true)
	hold("adj-b", true) // refused (409), say
	unhold("adj-a")     // the projector applies adj-a meanwhile
	expect("adj-b still holding", "alice:false:0")
	unhold("adj-b") // adj-b was not accepted: out (it gave the hold back to adj-a, applied already)
	expect("both out", "alice:true:42")
	hold("fix 1", true)  // event ids may hold spaces
	hold("fix 1", false) // a retry while it is on its way: not taken out for it
	hold("adj-d", true)
	unhold("fix 1")
	expect("adj-d on its way", "alice:false:0")
	unhold("adj-d")
	unhold("adj-d") // twice: nothing more to take out
	expect("all applied", "alice:true:42")
	if n, _ := rdb.HLen(ctx, prefix+":{global}:all_time:held").Result(); n != 0 {
		t.Errorf("the held hash keeps %d fields for users held by nobody", n)
	}
}
