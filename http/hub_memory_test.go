package http

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/messages"
)

// TestHubKeepsOnlyFollowedBoards: every API process's hub is told every board period's new
// top, followed by a stream or not; matches come and go (a board per match id) and days
// end. The hub keeps the snapshot of a board period only while a stream follows it: none
// of the 10,000 matches nobody watched, and a watched one's only until its last stream
// left, its client set with it.
func TestHubKeepsOnlyFollowedBoards(t *testing.T) {
	clk := newClock()
	h := hubWith(HubConfig{}, clk)
	entries := []messages.Entry{{Rank: 1, UserID: "alice", Score: 3}, {Rank: 2, UserID: "bob", Score: 1}}
	for i := range 10_000 {
		h.PublishTop(fmt.Sprintf("match:m-%d", i), "all_time", int64(i+1), clk.now(), entries)
		clk.advance(time.Second)
	}
	size := func() (int, int) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.latest), len(h.clients)
	}
	if snaps, sets := size(); snaps != 0 || sets != 0 {
		t.Fatalf("with no stream open the hub holds %d snapshots and %d client sets", snaps, sets)
	}
	var clients []*client
	for i := range 1_000 {
		c, err := h.register(fmt.Sprintf("viewer-%d", i), fmt.Sprintf("match:x-%d", i), "all_time", -1)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		h.PublishTop(fmt.Sprintf("match:x-%d", i), "all_time", 1, clk.now(), entries)
	}
	if snaps, sets := size(); snaps != 1_000 || sets != 1_000 {
		t.Fatalf("with 1,000 boards followed the hub holds %d snapshots and %d client sets", snaps, sets)
	}
	for _, c := range clients {
		h.unregister(c)
	}
	if snaps, sets := size(); snaps != 0 || sets != 0 {
		t.Fatalf("after every stream left the hub holds %d snapshots and %d client sets", snaps, sets)
	}
}

// TestMoveSendsNoDegradedSnapshotAfterVersions: at a reset while Redis is down, the new
// period's snapshot comes from PostgreSQL with version 0; a stream that had versions from
// Redis is not sent it (its ids would go back from about 1.8e15 to 0): the new period's
// first top from Redis follows. A stream that had none is sent it.
func TestMoveSendsNoDegradedSnapshotAfterVersions(t *testing.T) {
	clk := newClock()
	h := hubWith(HubConfig{Window: time.Millisecond}, clk) // fakeBoards reads version 0, as PostgreSQL does
	entries := []messages.Entry{{Rank: 1, UserID: "alice", Score: 3}}
	had, err := h.register("u1", "daily", "2026-01-01", -1)
	if err != nil {
		t.Fatal(err)
	}
	h.PublishTop("daily", "2026-01-01", 1_795_000_000_000_000, clk.now(), entries)
	if top, _, _ := had.take(0, clk.now()); top == nil {
		t.Fatal("no snapshot of the first day")
	}
	fresh, err := h.register("u2", "daily", "2026-01-01", -1) // connected since: it had none
	if err != nil {
		t.Fatal(err)
	}
	// The stream that had versions is told to move again later (errNoRedisVersion): on a
	// quiet board no notification brings the new day's top, a read once Redis is back does.
	if err := (&Subscription{hub: h, c: had}).Move(context.Background(), "2026-01-02"); !errors.Is(err, errNoRedisVersion) {
		t.Fatalf("move of a stream that had versions: %v, want errNoRedisVersion", err)
	}
	if err := (&Subscription{hub: h, c: fresh}).Move(context.Background(), "2026-01-02"); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	if top, _, _ := had.take(0, clk.now()); top != nil {
		t.Errorf("after versions from Redis, the reset sent the degraded snapshot with version %d", top.version)
	}
	if err := (&Subscription{hub: h, c: had}).Move(context.Background(), "2026-01-02"); !errors.Is(err, errNoRedisVersion) {
		t.Fatalf("the move tried again, Redis still down: %v, want errNoRedisVersion (the version it had is kept)", err)
	}
	if top, _, _ := fresh.take(0, clk.now()); top == nil || top.version != 0 {
		t.Errorf("a stream that had no version got %+v at the reset, want the degraded snapshot", top)
	}
	h.PublishTop("daily", "2026-01-02", 1_795_000_000_000_007, clk.now(), entries)
	// A move tried again after the new day's first top from Redis came keeps it.
	if err := (&Subscription{hub: h, c: had}).Move(context.Background(), "2026-01-02"); err != nil {
		t.Fatalf("the move tried again after a top from Redis: %v", err)
	}
	if top, _, _ := had.take(0, clk.now()); top == nil || top.version != 1_795_000_000_000_007 {
		t.Errorf("the new day's first top from Redis: %+v", top)
	}
}
