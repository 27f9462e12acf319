package http

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

// ownEntryBoards is a BoardReader over a mutable Redis: per period a top, and the user's own
// entry (ErrNotFound when it has none: removed, or hidden by a ban), the same in every
// period unless byPeriod is set.
type ownEntryBoards struct {
	fakeBoards
	mu       sync.Mutex
	tops     map[string]storage.Top
	entry    *storage.Entry
	byPeriod map[string]*storage.Entry
}

// entryIn is the own entry of a period (b.mu held).
func (b *ownEntryBoards) entryIn(period string) *storage.Entry {
	if b.byPeriod != nil {
		return b.byPeriod[period]
	}
	return b.entry
}

func (b *ownEntryBoards) Top(_ context.Context, _, period string, _ int) (storage.Top, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tops[period], nil
}

func (b *ownEntryBoards) User(_ context.Context, _, period, _ string) (storage.Entry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entryIn(period)
	if e == nil {
		return storage.Entry{}, storage.ErrNotFound
	}
	return *e, nil
}

func (b *ownEntryBoards) Users(_ context.Context, _, period string, ids []string) ([]storage.Entry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []storage.Entry
	for _, id := range ids {
		if e := b.entryIn(period); e != nil && e.UserID == id {
			out = append(out, *e)
		}
	}
	return out, nil
}

func (b *ownEntryBoards) setEntry(e *storage.Entry) { b.mu.Lock(); b.entry = e; b.mu.Unlock() }

// TestRefreshCorrectsAnOwnEntryMissedWhileKafkaWasDown: user u streams the global
// board (own entry: 10 points, rank 5). While Kafka is down (or the ScoresApplied
// notification is lost on its way, as notifications are best effort), u's entry goes to
// 20 points, rank 1. The periodic refresh (RefreshAll, every 5 s) corrects the top and,
// as the top's version moved, the own entries of the period's streams (it corrected only
// the top: the page showed u at 10 points, rank 5, until u's next change; found by a
// review). Refreshes that find nothing new send nothing again.
func TestRefreshCorrectsAnOwnEntryMissedWhileKafkaWasDown(t *testing.T) {
	clk := newClock()
	at := clk.now()
	boards := &ownEntryBoards{tops: map[string]storage.Top{"all_time": {Version: 10, UpdatedAt: at,
		Entries: []storage.Entry{{Rank: 1, UserID: "x", Score: 100, UpdatedAt: at}}}},
		entry: &storage.Entry{UserID: "u", Rank: 5, Score: 10, Version: 1, UpdatedAt: at}}
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, boards, nil)
	ctx := context.Background()
	sub, err := h.Subscribe(ctx, "u", "global", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(false)
	if got := userScores(mustFrames(sub, clk)); len(got) != 1 || got[0] != 10 {
		t.Fatalf("own entry on connect: %v", got)
	}
	// u scores 20 (rank 1); the top changes too. Neither notification arrives (Kafka down).
	boards.mu.Lock()
	boards.entry = &storage.Entry{UserID: "u", Rank: 1, Score: 20, Version: 2, UpdatedAt: at}
	boards.tops["all_time"] = storage.Top{Version: 11, UpdatedAt: at, Entries: []storage.Entry{{Rank: 1, UserID: "u", Score: 20, UpdatedAt: at}, {Rank: 2, UserID: "x", Score: 100, UpdatedAt: at}}}
	boards.mu.Unlock()
	// The refresh rounds that run while Kafka is down (and after it is back).
	for range 3 {
		if err := h.RefreshAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	frames := mustFrames(sub, clk)
	gotTop := false
	for _, f := range frames {
		if f.Event == "leaderboard.updated" && f.ID == "11" {
			gotTop = true
		}
	}
	if !gotTop {
		t.Fatalf("the refresh did not bring the top (version 11) either: %+v", frames)
	}
	if got := userScores(frames); len(got) != 1 || got[0] != 20 {
		t.Errorf("after the refresh rounds the stream got the new top (u first, 20 points) and user.rank.updated scores %v, want [20] once", got)
	}
	if err := h.RefreshAll(ctx); err != nil {
		t.Fatal(err)
	}
	if frames := mustFrames(sub, clk); len(frames) != 0 {
		t.Errorf("a refresh with nothing new sent %+v", frames)
	}
	// Removed while Kafka is down: the refresh withdraws it.
	boards.mu.Lock()
	boards.entry = nil
	boards.tops["all_time"] = storage.Top{Version: 12, UpdatedAt: at, Entries: []storage.Entry{{Rank: 1, UserID: "x", Score: 100, UpdatedAt: at}}}
	boards.mu.Unlock()
	if err := h.RefreshAll(ctx); err != nil {
		t.Fatal(err)
	}
	removed := 0
	for _, f := range mustFrames(sub, clk) {
		if f.Event == "user.rank.removed" {
			removed++
		}
	}
	if removed != 1 {
		t.Errorf("the refresh after u's entry was removed: %d user.rank.removed, want 1", removed)
	}
}

// TestRefreshSendsARankOthersMoved: user u streams the global board, her entry at rank 5.
// Another player passes her: her rank is 6, her entry (its version) and the top are as
// they were, so no notification names her. The periodic refresh sends user.rank.updated
// with rank 6 once (the stream kept showing rank 5 for good: a contract review), and a
// refresh that finds the same rank again sends nothing.
func TestRefreshSendsARankOthersMoved(t *testing.T) {
	clk := newClock()
	at := clk.now()
	boards := &ownEntryBoards{tops: map[string]storage.Top{"all_time": {Version: 10, UpdatedAt: at,
		Entries: []storage.Entry{{Rank: 1, UserID: "x", Score: 100, UpdatedAt: at}}}},
		entry: &storage.Entry{UserID: "u", Rank: 5, Score: 10, Version: 1, UpdatedAt: at}}
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, boards, nil)
	ctx := context.Background()
	sub, err := h.Subscribe(ctx, "u", "global", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(false)
	if got := userRanks(mustFrames(sub, clk)); len(got) != 1 || got[0] != 5 {
		t.Fatalf("own entry on connect: ranks %v, want [5]", got)
	}
	if err := h.RefreshAll(ctx); err != nil {
		t.Fatal(err)
	}
	if frames := mustFrames(sub, clk); len(frames) != 0 {
		t.Fatalf("a refresh with nothing new sent %+v", frames)
	}
	boards.setEntry(&storage.Entry{UserID: "u", Rank: 6, Score: 10, Version: 1, UpdatedAt: at})
	for range 2 {
		if err := h.RefreshAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := userRanks(mustFrames(sub, clk)); len(got) != 1 || got[0] != 6 {
		t.Errorf("after another player passed u: user.rank.updated ranks %v, want [6] once", got)
	}
	if err := h.RefreshAll(ctx); err != nil {
		t.Fatal(err)
	}
	if frames := mustFrames(sub, clk); len(frames) != 0 {
		t.Errorf("a refresh with nothing new sent %+v", frames)
	}
}

// TestOwnEntryRemovedIsWithdrawn: user u streams the global board and is shown her
// own entry (rank 1, 500 points). An admin removes the entry (DELETE
// /admin/boards/global/entries/u), or bans u: the projector tells u's streams
// (ScoresApplied -> UsersChanged), the top drops her. Her stream gets user.rank.removed
// (it got nothing: UsersChanged read ErrNotFound and skipped her, so the page kept showing
// "You: 500 points, rank #1" for an entry no read shows any more; found by a review).
func TestOwnEntryRemovedIsWithdrawn(t *testing.T) {
	clk := newClock()
	at := clk.now()
	boards := &ownEntryBoards{tops: map[string]storage.Top{"all_time": {Version: 10, UpdatedAt: at,
		Entries: []storage.Entry{{Rank: 1, UserID: "u", Score: 500, UpdatedAt: at}}}},
		entry: &storage.Entry{UserID: "u", Rank: 1, Score: 500, Version: 1, UpdatedAt: at}}
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, boards, nil)
	ctx := context.Background()
	sub, err := h.Subscribe(ctx, "u", "global", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(false)
	if got := userScores(mustFrames(sub, clk)); len(got) != 1 || got[0] != 500 {
		t.Fatalf("own entry on connect: %v", got)
	}
	boards.setEntry(nil) // removed (or hidden by a ban)
	h.PublishTop("global", "all_time", 11, at, nil)
	h.UsersChanged(ctx, "global", "all_time", []string{"u"})
	frames := mustFrames(sub, clk)
	removed := 0
	for _, f := range frames {
		if f.Event == "user.rank.removed" {
			removed++
			var v map[string]any
			if err := json.Unmarshal(f.Data, &v); err != nil || v["user_id"] != "u" || v["board"] != "global" || v["period"] != "all_time" {
				t.Errorf("user.rank.removed: %s", f.Data)
			}
		}
	}
	if removed != 1 {
		t.Errorf("u's entry was removed and her stream told: %d user.rank.removed in %+v, want 1 (the client kept showing her removed entry, 500 points, rank 1)", removed, frames)
	}
	// Told again (another change of the board), or a refresh: nothing more to withdraw.
	h.UsersChanged(ctx, "global", "all_time", []string{"u"})
	if frames := mustFrames(sub, clk); len(frames) != 0 {
		t.Errorf("a second removal told: %+v, want nothing", frames)
	}
	// Her next score shows again.
	boards.setEntry(&storage.Entry{UserID: "u", Rank: 3, Score: 7, Version: 2, UpdatedAt: at})
	h.UsersChanged(ctx, "global", "all_time", []string{"u"})
	if got := userScores(mustFrames(sub, clk)); len(got) != 1 || got[0] != 7 {
		t.Errorf("her next entry: %v, want 7", got)
	}
}

func mustFrames(sub *Subscription, clk *clock) []Frame {
	clk.advance(time.Second)
	f, _ := sub.Frames()
	return f
}

// redisBackReader is the reader of the daily board across a reset while Redis is down, then
// back: until redisUp, the new day is read from PostgreSQL (version 0, as Reads falls
// back); after, Reads loads it into Redis on demand (version 60).
type redisBackReader struct {
	fakeBoards
	mu      sync.Mutex
	redisUp bool
	at      time.Time
}

func (r *redisBackReader) Top(_ context.Context, _, period string, _ int) (storage.Top, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if period == "2026-01-01" {
		return storage.Top{Version: 50, UpdatedAt: r.at, Entries: []storage.Entry{{Rank: 1, UserID: "old", Score: 500, UpdatedAt: r.at}}}, nil
	}
	if !r.redisUp {
		return storage.Top{}, nil // PostgreSQL: an empty new day, no version
	}
	return storage.Top{Version: 60, UpdatedAt: r.at}, nil
}

// redisOnlyTops is the refresh's Redis-only reader: the new day was never loaded into Redis
// (nobody scored on it, and the stream's read of it went to PostgreSQL).
type redisOnlyTops struct{ r *redisBackReader }

func (n redisOnlyTops) Top(ctx context.Context, board, period string, limit int) (storage.Top, error) {
	if period == "2026-01-02" {
		return storage.Top{}, storage.ErrNotLoaded
	}
	return n.r.Top(ctx, board, period, limit)
}

// TestStreamMovesToTheNewDayOnceRedisIsBack: a stream follows the daily board's current
// period (2026-01-01, version 50). Redis is down at midnight: the move to 2026-01-02 reads
// the new day from PostgreSQL (version 0), which Move does not offer after versions from
// Redis. Redis comes back; nobody scores on the new day yet, so no notification comes and
// the refresh skips it (ErrNotLoaded): the stream moves again, and that read loads the
// day into Redis. (Move answered no error, and the client showed yesterday's board,
// counting down to a reset that passed, for as long as the board stayed quiet; found by
// a review.)
func TestStreamMovesToTheNewDayOnceRedisIsBack(t *testing.T) {
	cfg, err := configs.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	b, _ := cfg.Board("daily")
	boards := &redisBackReader{at: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	clk := &gateClock{t: time.Date(2026, 1, 1, 23, 59, 59, 0, cfg.Timezone)}
	periods := NewPeriods(cfg, noSeasons{}, clk.now)
	hub := NewHub(HubConfig{Window: time.Millisecond, Tops: redisOnlyTops{boards}}, boards, nil)
	s := &server{Deps: Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Periods: periods, Hub: hub,
		Realtime: RealtimeConfig{Heartbeat: 50 * time.Millisecond, MoveRetry: 100 * time.Millisecond}}}
	s.Realtime.setDefaults()
	s.tokens = tokens{secret: []byte(cfg.JWTSecret), maxTTL: cfg.JWTMaxTTL, now: time.Now}
	defer hub.Close()
	resp := openStream(t, s, b.Key())
	var mu sync.Mutex
	var seen []string
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var v struct {
					Period  string `json:"period"`
					Version *int64 `json:"version"`
				}
				if json.Unmarshal([]byte(data), &v) == nil && v.Version != nil {
					mu.Lock()
					seen = append(seen, v.Period)
					mu.Unlock()
				}
			}
		}
	}()
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return ""
		}
		return seen[len(seen)-1]
	}
	waitFor := func(d time.Duration, want string) bool {
		for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if last() == want {
				return true
			}
		}
		return false
	}
	if !waitFor(5*time.Second, "2026-01-01") {
		t.Fatalf("snapshot on connect: %v", seen)
	}
	clk.advance(2 * time.Second) // 00:00:01 on 2026-01-02, Redis down
	time.Sleep(300 * time.Millisecond)
	boards.mu.Lock()
	boards.redisUp = true // Redis back
	boards.mu.Unlock()
	for range 3 { // refresh rounds (every 5 s in the service)
		time.Sleep(200 * time.Millisecond)
		if err := hub.RefreshAll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !waitFor(5*time.Second, "2026-01-02") {
		mu.Lock()
		defer mu.Unlock()
		t.Errorf("Redis was down at midnight and is back (heartbeats every 50 ms, 3 refresh rounds): the stream's snapshots are of %v; it still shows yesterday's board", seen)
	}
}

// TestRefreshOverRedisCorrectsAnOwnEntry is TestRefreshCorrectsAnOwnEntryMissedWhileKafkaWasDown
// over the real Redis reader (storage.Boards) instead of the fake: u is shown her entry
// (version 1, 10 points); her entry goes to version 2, 20 points, and the notification is
// lost; the refresh finds the newer top and brings 20 points (Boards.Users, which the
// refresh reads, left Entry.Version 0, and the entry was taken for an older one than the
// stream had and dropped; found by a review).
func TestRefreshOverRedisCorrectsAnOwnEntry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb, prefix := storagetest.FromEnv(os.Getenv).NewRedis(t)
	boards := storage.NewBoards(rdb, prefix, 10)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	target := storage.Target{Board: "global", Period: "all_time"}
	pages := [][]storage.EntryState{{
		{Board: "global", Period: "all_time", UserID: "x", Score: 100, SortKey: 100, Version: 1, ReachedAt: at, UpdatedAt: at},
		{Board: "global", Period: "all_time", UserID: "u", Score: 10, SortKey: 10, Version: 1, ReachedAt: at, UpdatedAt: at},
	}}
	if _, err := boards.Load(ctx, target, func() ([]storage.EntryState, map[string]string, error) {
		if len(pages) == 0 {
			return nil, nil, nil
		}
		p := pages[0]
		pages = pages[1:]
		return p, nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if e, err := boards.User(ctx, "global", "all_time", "u"); err != nil || e.Version != 1 {
		t.Fatalf("User: %+v %v", e, err)
	}
	if es, err := boards.Users(ctx, "global", "all_time", []string{"u"}); err != nil || len(es) != 1 || es[0].Version != 1 {
		t.Errorf("Users gives %+v %v: Version %d, User gives 1", es, err, func() int64 {
			if len(es) == 1 {
				return es[0].Version
			}
			return -1
		}())
	}

	clk := newClock()
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, boards, nil)
	if err := h.Refresh(ctx, "global", "all_time"); err != nil {
		t.Fatal(err)
	}
	sub, err := h.Subscribe(ctx, "u", "global", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(false)
	if got := userScores(mustFrames(sub, clk)); len(got) != 1 || got[0] != 10 {
		t.Fatalf("own entry on connect: %v", got)
	}
	// u scores 20; the notification is lost (Kafka down).
	if _, _, err := boards.Apply(ctx, target, []storage.EntryState{
		{Board: "global", Period: "all_time", UserID: "u", Score: 20, SortKey: 20, Version: 2, ReachedAt: at.Add(time.Second), UpdatedAt: at.Add(time.Second)},
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Refresh(ctx, "global", "all_time"); err != nil {
		t.Fatal(err)
	}
	if got := userScores(mustFrames(sub, clk)); len(got) != 1 || got[0] != 20 {
		t.Errorf("after the refresh the stream's user.rank.updated scores are %v, want [20]", got)
	}
}

// slowUsers is ownEntryBoards whose Users hands back what it read only when told:
// the window between the refresh's read and its queueing.
type slowUsers struct {
	*ownEntryBoards
	read, release chan struct{}
}

func (b slowUsers) Users(ctx context.Context, board, period string, ids []string) ([]storage.Entry, error) {
	es, err := b.ownEntryBoards.Users(ctx, board, period, ids)
	close(b.read)
	<-b.release
	return es, err
}

// TestRefreshDoesNotBringBackARemovedEntry: the refresh reads u's entry (version
// 2); before it queues it, an admin removes the entry and the projector's notification
// withdraws it (user.rank.removed). The refresh then queues what it read, which must not
// bring the entry back (a removal carries no version: it did, until u's next change).
func TestRefreshDoesNotBringBackARemovedEntry(t *testing.T) {
	clk := newClock()
	at := clk.now()
	inner := &ownEntryBoards{tops: map[string]storage.Top{"all_time": {Version: 10, UpdatedAt: at,
		Entries: []storage.Entry{{Rank: 1, UserID: "x", Score: 100, UpdatedAt: at}}}},
		entry: &storage.Entry{UserID: "u", Rank: 5, Score: 10, Version: 1, UpdatedAt: at}}
	boards := slowUsers{inner, make(chan struct{}), make(chan struct{})}
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, boards, nil)
	ctx := context.Background()
	sub, err := h.Subscribe(ctx, "u", "global", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(false)
	mustFrames(sub, clk)
	// u scores 20 (version 2), the notification is lost; a refresh starts reading.
	inner.mu.Lock()
	inner.entry = &storage.Entry{UserID: "u", Rank: 1, Score: 20, Version: 2, UpdatedAt: at}
	inner.tops["all_time"] = storage.Top{Version: 11, UpdatedAt: at, Entries: []storage.Entry{{Rank: 1, UserID: "u", Score: 20, UpdatedAt: at}}}
	inner.mu.Unlock()
	done := make(chan error)
	go func() { done <- h.Refresh(ctx, "global", "all_time") }()
	select {
	case <-boards.read:
	case <-time.After(2 * time.Second):
		close(boards.release)
		t.Skip("the refresh no longer reads Users")
	}
	// Meanwhile the entry is removed and the notification arrives.
	inner.setEntry(nil)
	h.UsersChanged(ctx, "global", "all_time", []string{"u"})
	close(boards.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var last string
	for _, f := range mustFrames(sub, clk) {
		if f.Event == "user.rank.updated" || f.Event == "user.rank.removed" {
			last = f.Event
		}
	}
	if last != "user.rank.removed" {
		t.Errorf("the stream's last own-entry event is %q: the removed entry is shown again", last)
	}
}

// TestRefreshDoesNotWithdrawAnEntryToldMeanwhile: the refresh reads u's entry as absent
// (removed); before it queues that, u scores again and the notification shows her new
// entry: the refresh's withdrawal, read before it, must not hide it.
func TestRefreshDoesNotWithdrawAnEntryToldMeanwhile(t *testing.T) {
	clk := newClock()
	at := clk.now()
	inner := &ownEntryBoards{tops: map[string]storage.Top{"all_time": {Version: 10, UpdatedAt: at,
		Entries: []storage.Entry{{Rank: 1, UserID: "x", Score: 100, UpdatedAt: at}}}},
		entry: &storage.Entry{UserID: "u", Rank: 5, Score: 10, Version: 1, UpdatedAt: at}}
	boards := slowUsers{inner, make(chan struct{}), make(chan struct{})}
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, boards, nil)
	ctx := context.Background()
	sub, err := h.Subscribe(ctx, "u", "global", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(false)
	mustFrames(sub, clk)
	// Removed, and the notification lost; a refresh starts reading.
	inner.mu.Lock()
	inner.entry = nil
	inner.tops["all_time"] = storage.Top{Version: 11, UpdatedAt: at, Entries: []storage.Entry{{Rank: 1, UserID: "x", Score: 100, UpdatedAt: at}}}
	inner.mu.Unlock()
	done := make(chan error)
	go func() { done <- h.Refresh(ctx, "global", "all_time") }()
	<-boards.read
	// Meanwhile u scores 30, and that is told.
	inner.setEntry(&storage.Entry{UserID: "u", Rank: 2, Score: 30, Version: 3, UpdatedAt: at})
	h.UsersChanged(ctx, "global", "all_time", []string{"u"})
	close(boards.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var last string
	for _, f := range mustFrames(sub, clk) {
		if f.Event == "user.rank.updated" || f.Event == "user.rank.removed" {
			last = f.Event
		}
	}
	if last != "user.rank.updated" {
		t.Errorf("the stream's last own-entry event is %q: the refresh's read from before hid her new entry", last)
	}
}
