package http

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

type fakeBoards struct{}

func (fakeBoards) Top(context.Context, string, string, int) (storage.Top, error) {
	return storage.Top{}, nil
}
func (fakeBoards) User(context.Context, string, string, string) (storage.Entry, error) {
	return storage.Entry{Rank: 3, Score: 7}, nil
}
func (fakeBoards) Page(context.Context, string, string, *storage.Position, int) ([]storage.Entry, error) {
	return nil, nil
}
func (fakeBoards) Around(context.Context, string, string, string, int) (storage.Entry, []storage.Entry, error) {
	return storage.Entry{}, nil, storage.ErrNotFound
}
func (fakeBoards) Users(context.Context, string, string, []string) ([]storage.Entry, error) {
	return nil, nil
}

// clock is a hand-moved clock for the hub.
type clock struct{ t time.Time }

func (c *clock) now() time.Time            { return c.t }
func (c *clock) advance(d time.Duration)   { c.t = c.t.Add(d) }
func newClock() *clock                     { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func hubWith(cfg HubConfig, c *clock) *Hub { cfg.Now = c.now; return NewHub(cfg, fakeBoards{}, nil) }

// topOf is a top whose leader scored v: each version a different top.
func topOf(v int64) []messages.Entry { return []messages.Entry{{Rank: 1, UserID: "x", Score: v}} }

func TestHubKeepsOnlyTheNewestSnapshot(t *testing.T) {
	clk := newClock()
	h := hubWith(HubConfig{Window: time.Millisecond}, clk)
	c, err := h.register("u", "global", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int64{1, 2, 5, 4, 3} {
		h.PublishTop("global", "all_time", v, time.Time{}, []messages.Entry{{Rank: 1, UserID: "x", Score: v}})
	}
	top, _, _ := c.take(0, clk.now())
	if top == nil || top.version != 5 {
		t.Fatalf("took %+v, want only version 5", top)
	}
	if top, _, _ := c.take(0, clk.now()); top != nil {
		t.Fatalf("second take returned version %d", top.version)
	}
	h.PublishTop("global", "all_time", 4, time.Time{}, topOf(4)) // older than delivered: never sent
	if top, _, _ := c.take(0, clk.now()); top != nil {
		t.Fatalf("older version %d offered after 5", top.version)
	}
}

// TestHubWindowSpacesSnapshots: within the window after a snapshot, the next one is held
// back for exactly the rest of the window, then handed out.
func TestHubWindowSpacesSnapshots(t *testing.T) {
	clk := newClock()
	h := hubWith(HubConfig{Window: 200 * time.Millisecond}, clk)
	c, _ := h.register("u", "global", "all_time", -1)
	h.PublishTop("global", "all_time", 1, time.Time{}, topOf(1))
	if top, _, _ := c.take(h.cfg.Window, clk.now()); top == nil {
		t.Fatal("first snapshot held back")
	}
	clk.advance(50 * time.Millisecond)
	h.PublishTop("global", "all_time", 2, time.Time{}, topOf(2))
	top, _, wait := c.take(h.cfg.Window, clk.now())
	if top != nil || wait != 150*time.Millisecond {
		t.Fatalf("50 ms after a snapshot: took %v, wait %v; want nothing for 150ms", top, wait)
	}
	clk.advance(149 * time.Millisecond)
	if top, _, _ := c.take(h.cfg.Window, clk.now()); top != nil {
		t.Fatalf("handed out %d 1 ms before the window ended", top.version)
	}
	clk.advance(time.Millisecond)
	if top, _, _ := c.take(h.cfg.Window, clk.now()); top == nil || top.version != 2 {
		t.Fatalf("after the window: %+v", top)
	}
}

func TestHubDropsClientsThatStayBehind(t *testing.T) {
	clk := newClock()
	h := hubWith(HubConfig{MaxBehind: 50 * time.Millisecond}, clk)
	slow, _ := h.register("slow", "global", "all_time", -1)
	fast, _ := h.register("fast", "global", "all_time", -1)
	h.PublishTop("global", "all_time", 1, time.Time{}, topOf(1))
	fast.take(0, clk.now())
	clk.advance(50 * time.Millisecond)
	h.PublishTop("global", "all_time", 2, time.Time{}, topOf(2)) // exactly MaxBehind: still kept
	select {
	case <-slow.gone:
		t.Fatal("dropped at exactly MaxBehind")
	default:
	}
	fast.take(0, clk.now())
	clk.advance(time.Millisecond)
	h.PublishTop("global", "all_time", 3, time.Time{}, topOf(3))
	select {
	case <-slow.gone:
	default:
		t.Fatal("client with a snapshot unsent for longer than MaxBehind was not dropped")
	}
	select {
	case <-fast.gone:
		t.Fatal("a client that keeps up was dropped")
	default:
	}
}

func TestHubUserEventsGoToThatUserOnly(t *testing.T) {
	h := NewHub(HubConfig{}, fakeBoards{}, nil)
	me, _ := h.register("me", "global", "all_time", -1)
	other, _ := h.register("other", "global", "all_time", -1)
	h.UsersChanged(context.Background(), "global", "all_time", []string{"me"})
	if _, users, _ := me.take(0, time.Now()); len(users) != 1 {
		t.Fatalf("own user events: %d", len(users))
	}
	if _, users, _ := other.take(0, time.Now()); len(users) != 0 {
		t.Fatalf("another user's stream got %d events", len(users))
	}
}

func TestHubNeverQueuesWhatAReconnectingClientHas(t *testing.T) {
	h := NewHub(HubConfig{}, fakeBoards{}, nil)
	c, _ := h.register("u", "global", "all_time", 5) // Last-Event-ID: 5
	h.PublishTop("global", "all_time", 4, time.Time{}, topOf(4))
	h.PublishTop("global", "all_time", 5, time.Time{}, topOf(5))
	if top, _, _ := c.take(0, time.Now()); top != nil {
		t.Fatalf("queued version %d for a client at 5", top.version)
	}
	h.PublishTop("global", "all_time", 6, time.Time{}, topOf(6))
	if top, _, _ := c.take(0, time.Now()); top == nil || top.version != 6 {
		t.Fatalf("newer version not queued: %+v", top)
	}
}

// TestHubSubscription: a subscription hands out the snapshot on connect and then updates
// as frames, enforces the caps, and ends when the hub closes.
func TestHubSubscription(t *testing.T) {
	clk := newClock()
	h := hubWith(HubConfig{MaxStreams: 2, MaxStreamsPerUser: 1}, clk)
	ctx := context.Background()
	sub, err := h.Subscribe(ctx, "u", "global", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	frames, _ := sub.Frames()
	if len(frames) != 2 || frames[0].Event != "leaderboard.updated" || frames[0].ID != "0" ||
		frames[1].Event != "user.rank.updated" || !strings.Contains(string(frames[1].Data), `"rank":3`) {
		t.Fatalf("on connect: %+v, want the snapshot of version 0, then the user's own entry (rank 3)", frames)
	}
	if _, err := h.Subscribe(ctx, "u", "global", "all_time", -1); !errors.Is(err, errTooManyUserStreams) {
		t.Fatalf("a second stream of one user: %v", err)
	}
	other, err := h.Subscribe(ctx, "v", "global", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Subscribe(ctx, "w", "global", "all_time", -1); !errors.Is(err, errTooManyStreams) {
		t.Fatalf("a third stream: %v", err)
	}
	other.Close(false)
	if _, err := h.Subscribe(ctx, "w", "global", "all_time", -1); err != nil {
		t.Fatalf("a stream after one closed: %v", err)
	}
	clk.advance(time.Second)
	h.PublishTop("global", "all_time", 7, time.Time{}, []messages.Entry{{Rank: 1, UserID: "x", Score: 1}})
	select {
	case <-sub.Ready():
	default:
		t.Fatal("no signal after an update")
	}
	frames, _ = sub.Frames()
	if len(frames) != 1 || frames[0].ID != "7" {
		t.Fatalf("after an update: %+v", frames)
	}
	h.Close()
	select {
	case <-sub.Done():
	default:
		t.Fatal("the subscription did not end with the hub")
	}
	if _, err := h.Subscribe(ctx, "z", "global", "all_time", -1); !errors.Is(err, errShuttingDown) {
		t.Fatalf("subscribe after Close: %v", err)
	}
}

// TestHubSendsOnlyChangesOfTheStreamedTop: the projector publishes
// the board's cached top (LEADERBOARD_TOP_N, 100 by default) while a stream carries the
// top 10 (TopSize). A change at rank 11 to 100 gives a new version of the cached top but
// leaves the streamed top-10 as it was: API.md promises leaderboard.updated "while the
// top-N changes" (README: "while the top-10 changes"), so nothing is due: the hub re-sent
// the identical top-10 with a new id, to every stream of the board, up to 4/s each. A
// change within the top 10 is sent. Found by a review.
func TestHubSendsOnlyChangesOfTheStreamedTop(t *testing.T) {
	clk := newClock()
	h := hubWith(HubConfig{Window: time.Millisecond}, clk) // TopSize: the default 10
	c, err := h.register("viewer", "global", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	top := func(third, tail int64) []messages.Entry {
		var es []messages.Entry
		for i := range 12 {
			es = append(es, messages.Entry{Rank: int64(i + 1), UserID: fmt.Sprintf("u%02d", i), Score: 1000 - int64(i)*10})
		}
		es[2].Score, es[11].Score = third, tail // ranks 3 and 12
		return es
	}
	h.PublishTop("global", "all_time", 100, clk.now(), top(980, 5))
	if first, _, _ := c.take(0, clk.now()); first == nil {
		t.Fatal("no first snapshot")
	}
	clk.advance(time.Second)
	h.PublishTop("global", "all_time", 101, clk.now(), top(980, 6)) // rank 12's score changed, the top 10 did not
	clk.advance(time.Second)
	if again, _, _ := c.take(0, clk.now()); again != nil {
		t.Fatalf("a leaderboard.updated (id %d) although the streamed top-10 did not change: %s", again.version, again.data)
	}
	h.PublishTop("global", "all_time", 102, clk.now(), top(981, 6)) // rank 3's score changed
	clk.advance(time.Second)
	if next, _, _ := c.take(0, clk.now()); next == nil || next.version != 102 {
		t.Fatalf("a change within the streamed top-10: %v, want version 102 sent", next)
	}
}

// redisTop is a BoardReader whose Top is what Redis holds now.
type redisTop struct {
	fakeBoards
	mu  sync.Mutex
	top storage.Top
}

func (r *redisTop) set(t storage.Top) { r.mu.Lock(); r.top = t; r.mu.Unlock() }
func (r *redisTop) Top(context.Context, string, string, int) (storage.Top, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.top, nil
}

// TestHubStreamGetsTheTopAfterACoalescedVersion: notifications are coalesced (the
// ChangePublisher keeps only the newest top of a board per 100 ms) and best effort, so
// the hub may never see a version Redis had. Stream X follows the board (the hub has
// version 10: top A). Redis moves to version 11 (top B: a cheater's score on top), and
// stream Y opens, reading version 11 (B) from Redis. The cheater is removed: version 12,
// top A again; version 11's notification was coalesced away. Y must get version 12 (A):
// its board shows B. The same-entries check compared version 12 with the hub's latest (10,
// A) and sent it to nobody: Y showed the removed cheater until the next change of the top.
// It compares with what each client was offered. Found by a review.
func TestHubStreamGetsTheTopAfterACoalescedVersion(t *testing.T) {
	clk := newClock()
	at := clk.now()
	a := []messages.Entry{{Rank: 1, UserID: "alice", Score: 100, UpdatedAt: at}, {Rank: 2, UserID: "bob", Score: 90, UpdatedAt: at}}
	b := append([]messages.Entry{{Rank: 1, UserID: "cheater", Score: 1_000_000, UpdatedAt: at}},
		messages.Entry{Rank: 2, UserID: "alice", Score: 100, UpdatedAt: at}, messages.Entry{Rank: 3, UserID: "bob", Score: 90, UpdatedAt: at})
	stored := func(es []messages.Entry) []storage.Entry {
		var out []storage.Entry
		for _, e := range es {
			out = append(out, storage.Entry{Rank: e.Rank, UserID: e.UserID, Score: e.Score, UpdatedAt: e.UpdatedAt})
		}
		return out
	}
	redis := &redisTop{top: storage.Top{Version: 10, UpdatedAt: at, Entries: stored(a)}}
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, redis, nil)
	ctx := context.Background()

	x, err := h.Subscribe(ctx, "x", "global", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close(false)
	h.PublishTop("global", "all_time", 10, at, a)
	x.Frames()

	redis.set(storage.Top{Version: 11, UpdatedAt: at, Entries: stored(b)}) // its notification never comes
	y, err := h.Subscribe(ctx, "y", "global", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close(false)
	clk.advance(time.Second)
	frames, _ := y.Frames()
	if len(frames) == 0 || frames[0].ID != "11" {
		t.Fatalf("Y's first frames: %+v, want version 11", frames)
	}

	redis.set(storage.Top{Version: 12, UpdatedAt: at, Entries: stored(a)})
	h.PublishTop("global", "all_time", 12, at, a) // the cheater removed
	clk.advance(time.Second)
	frames, _ = y.Frames()
	var got []string
	for _, f := range frames {
		if f.Event == "leaderboard.updated" {
			var v struct {
				Entries []messages.Entry `json:"entries"`
			}
			_ = json.Unmarshal(f.Data, &v)
			for _, e := range v.Entries {
				got = append(got, e.UserID)
			}
		}
	}
	if len(got) == 0 {
		t.Errorf("stream Y got no leaderboard.updated for version 12: it still shows version 11, the removed cheater first, while the board's top is alice, bob")
	}
}

// periodTops is a BoardReader whose Top is, per period, what Redis holds.
type periodTops struct {
	fakeBoards
	tops map[string]storage.Top
}

func (p periodTops) Top(_ context.Context, _, period string, _ int) (storage.Top, error) {
	return p.tops[period], nil
}

// gateClock is a clock whose n-th reading after arm blocks until release.
type gateClock struct {
	mu       sync.Mutex
	t        time.Time
	left     int
	blocked  chan struct{}
	released chan struct{}
}

func (g *gateClock) now() time.Time {
	g.mu.Lock()
	block := false
	if g.left > 0 {
		g.left--
		block = g.left == 0
	}
	t := g.t
	g.mu.Unlock()
	if block {
		close(g.blocked)
		<-g.released
	}
	return t
}

func (g *gateClock) arm(n int) {
	g.mu.Lock()
	g.left, g.blocked, g.released = n, make(chan struct{}), make(chan struct{})
	g.mu.Unlock()
}

func (g *gateClock) advance(d time.Duration) { g.mu.Lock(); g.t = g.t.Add(d); g.mu.Unlock() }

// TestHubMovedStreamGetsNoTopOfThePeriodItLeft: a stream follows the daily board's
// 2026-01-01 (version 50). A top of that day (version 51, the projector's backlog of the
// day) is being published, its targets taken, when the day ends and the stream moves to
// 2026-01-02 (version 1 there). PublishTop then offered the old day's version 51 to the
// moved client: it replaced the new day's snapshot, the stream showed yesterday's board as
// today's, and every top of the new day was skipped (version <= 51) until the new day's
// versions passed 51. A snapshot now names its period, and a client takes only its own
// period's. Found by a review.
func TestHubMovedStreamGetsNoTopOfThePeriodItLeft(t *testing.T) {
	clk := &gateClock{t: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}
	at := clk.t
	day1 := []storage.Entry{{Rank: 1, UserID: "old", Score: 500, UpdatedAt: at}}
	day2 := []storage.Entry{{Rank: 1, UserID: "new", Score: 5, UpdatedAt: at}}
	boards := periodTops{tops: map[string]storage.Top{
		"2026-01-01": {Version: 50, UpdatedAt: at, Entries: day1},
		"2026-01-02": {Version: 1, UpdatedAt: at, Entries: day2},
	}}
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, boards, nil)
	ctx := context.Background()
	sub, err := h.Subscribe(ctx, "u", "daily", "2026-01-01", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(false)
	clk.advance(time.Second)
	sub.Frames()

	clk.arm(2) // PublishTop reads the clock to render, then to offer (after taking its targets)
	blocked, released := clk.blocked, clk.released
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.PublishTop("daily", "2026-01-01", 51, at, []messages.Entry{{Rank: 1, UserID: "old", Score: 600, UpdatedAt: at}})
	}()
	<-blocked
	if err := sub.Move(ctx, "2026-01-02"); err != nil {
		t.Fatal(err)
	}
	close(released)
	<-done

	periodsOf := func() []string {
		clk.advance(time.Second)
		frames, _ := sub.Frames()
		var got []string
		for _, f := range frames {
			if f.Event != "leaderboard.updated" {
				continue
			}
			var v struct {
				Period string `json:"period"`
			}
			_ = json.Unmarshal(f.Data, &v)
			got = append(got, v.Period+"@"+f.ID)
		}
		return got
	}
	if got := periodsOf(); len(got) != 1 || got[0] != "2026-01-02@1" {
		t.Errorf("after the move the stream got %v, want only 2026-01-02@1 (the day it follows)", got)
	}
	h.PublishTop("daily", "2026-01-02", 2, at, []messages.Entry{{Rank: 1, UserID: "new", Score: 9, UpdatedAt: at}})
	if got := periodsOf(); len(got) != 1 || got[0] != "2026-01-02@2" {
		t.Errorf("the new day's next top: the stream got %v, want 2026-01-02@2", got)
	}
}

// gatedUsers is a BoardReader whose User read of one period blocks, once armed, until
// released (a Redis round trip in flight); other periods answer at once.
type gatedUsers struct {
	periodTops
	mu       sync.Mutex
	gate     string
	blocked  chan struct{}
	released chan struct{}
}

func (g *gatedUsers) User(_ context.Context, _, period, _ string) (storage.Entry, error) {
	g.mu.Lock()
	block := g.gate == period
	if block {
		g.gate = ""
	}
	g.mu.Unlock()
	if block {
		close(g.blocked)
		<-g.released
	}
	if period == "2026-01-01" {
		return storage.Entry{Rank: 1, Score: 500}, nil // yesterday: first
	}
	return storage.Entry{Rank: 40, Score: 5}, nil // today: 40th
}

// TestHubMovedStreamGetsNoRankOfThePeriodItLeft: a stream of user u follows the daily
// board's 2026-01-01. A change of u's entry on that day is being told to her streams (its
// targets taken, u's rank being read) when the day ends and the stream moves to
// 2026-01-02, which queues u's rank there (40th). The old day's rank (1st) is then queued
// after it: the stream's last user.rank.updated showed yesterday's rank as the one she has
// now, until her next change today. A client takes only its period's user events, as its
// snapshots. Found by a review.
func TestHubMovedStreamGetsNoRankOfThePeriodItLeft(t *testing.T) {
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	boards := &gatedUsers{periodTops: periodTops{tops: map[string]storage.Top{
		"2026-01-01": {Version: 50, UpdatedAt: at},
		"2026-01-02": {Version: 1, UpdatedAt: at},
	}}}
	clk := newClock()
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, boards, nil)
	ctx := context.Background()
	sub, err := h.Subscribe(ctx, "u", "daily", "2026-01-01", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(false)
	clk.advance(time.Second)
	sub.Frames()

	boards.mu.Lock()
	boards.gate, boards.blocked, boards.released = "2026-01-01", make(chan struct{}), make(chan struct{})
	blocked, released := boards.blocked, boards.released
	boards.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.UsersChanged(ctx, "daily", "2026-01-01", []string{"u"})
	}()
	<-blocked
	if err := sub.Move(ctx, "2026-01-02"); err != nil {
		t.Fatal(err)
	}
	close(released)
	<-done

	clk.advance(time.Second)
	frames, _ := sub.Frames()
	var ranks []string
	for _, f := range frames {
		if f.Event != "user.rank.updated" {
			continue
		}
		var v struct {
			Period string `json:"period"`
			Rank   int64  `json:"rank"`
		}
		_ = json.Unmarshal(f.Data, &v)
		ranks = append(ranks, v.Period)
	}
	if len(ranks) == 0 || ranks[len(ranks)-1] != "2026-01-02" {
		t.Errorf("after the move the stream's user.rank.updated events are of periods %v: the last one, what the client shows, is not 2026-01-02 (the day it follows)", ranks)
	}
	for _, p := range ranks {
		if p != "2026-01-02" {
			t.Errorf("a moved stream got a user.rank.updated of %s, the period it left", p)
		}
	}
}

// TestHubRefreshAllPublishesATopSwappedInWithoutNotification: a rebuild on another
// process swaps a repaired top into Redis and no notification tells this one; the
// periodic refresh reads the followed tops and publishes the newer one to the streams.
func TestHubRefreshAllPublishesATopSwappedInWithoutNotification(t *testing.T) {
	clk := newClock()
	at := clk.now()
	redis := &redisTop{top: storage.Top{Version: 10, UpdatedAt: at, Entries: []storage.Entry{{Rank: 1, UserID: "ghost", Score: 999, UpdatedAt: at}}}}
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, redis, nil)
	ctx := context.Background()
	sub, err := h.Subscribe(ctx, "x", "match:m-1", "all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(false)
	sub.Frames()
	redis.set(storage.Top{Version: 11, UpdatedAt: at, Entries: []storage.Entry{{Rank: 1, UserID: "alice", Score: 50, UpdatedAt: at}}})
	if err := h.RefreshAll(ctx); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	frames, _ := sub.Frames()
	if len(frames) == 0 || frames[0].ID != "11" || !strings.Contains(string(frames[0].Data), `"alice"`) {
		t.Fatalf("after the refresh: %+v, want version 11 with alice", frames)
	}
	if err := h.RefreshAll(ctx); err != nil { // nothing newer: nothing sent
		t.Fatal(err)
	}
	clk.advance(time.Second)
	if frames, _ := sub.Frames(); len(frames) != 0 {
		t.Errorf("a refresh without a newer top sent %+v", frames)
	}
}

// failingTops is a TopReader that answers err and counts its reads.
type failingTops struct {
	err   error
	reads atomic.Int64
}

func (f *failingTops) Top(context.Context, string, string, int) (storage.Top, error) {
	f.reads.Add(1)
	return storage.Top{}, f.err
}

// TestHubRefreshAllStopsWhileRedisIsDown: the refresh reads Redis alone. While Redis is
// down a round stops at its first read (each would wait out the timeout, and reading
// PostgreSQL instead brings no version to compare); a period Redis does not hold, or one
// whose top cannot be read, is skipped and the round goes on (a broken top stopped it,
// and the others were refreshed only when the map's order reached them first; found by
// a review).
func TestHubRefreshAllStopsWhileRedisIsDown(t *testing.T) {
	for _, c := range []struct {
		err   error
		reads int64
	}{{storage.ErrUnavailable, 1}, {storage.ErrNotLoaded, 3}, {errors.New("parse top: a malformed line"), 3}} {
		tops := &failingTops{err: c.err}
		h := NewHub(HubConfig{Tops: tops}, &redisTop{}, nil)
		for _, period := range []string{"2026-11-01", "2026-11-02", "2026-11-03"} {
			sub, err := h.Subscribe(context.Background(), "x", "daily", period, -1)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close(false)
		}
		err := h.RefreshAll(context.Background())
		if got := tops.reads.Load(); got != c.reads || (c.err == storage.ErrNotLoaded) != (err == nil) {
			t.Errorf("%v: %d reads, RefreshAll = %v; want %d reads", c.err, got, err, c.reads)
		}
	}
}
