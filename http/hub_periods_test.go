package http

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// Streams across a period's end (found by a review of the live feed).

// TestMoveDropsTheOldPeriodsOwnEntry: a change of u's entry on 2026-01-01 is queued just
// before midnight, and the stream moves to 2026-01-02, where u has no entry. After the
// move the stream writes the new day, and nothing of u's on the old one
// (user.rank.updated names no period: a client shows it on the board it shows).
func TestMoveDropsTheOldPeriodsOwnEntry(t *testing.T) {
	clk := newClock()
	at := clk.now()
	boards := &ownEntryBoards{
		tops: map[string]storage.Top{
			"2026-01-01": {Version: 10, UpdatedAt: at, Entries: []storage.Entry{{Rank: 1, UserID: "u", Score: 500, UpdatedAt: at}}},
			"2026-01-02": {Version: 20},
		},
		byPeriod: map[string]*storage.Entry{"2026-01-01": {Rank: 1, UserID: "u", Score: 500, Version: 1, UpdatedAt: at}},
	}
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, boards, nil)
	sub, err := h.Subscribe(context.Background(), "u", "daily", "2026-01-01", -1)
	if err != nil {
		t.Fatal(err)
	}
	mustFrames(sub, clk) // the snapshot and u's entry on connect
	boards.mu.Lock()
	boards.byPeriod["2026-01-01"] = &storage.Entry{Rank: 1, UserID: "u", Score: 900, Version: 2, UpdatedAt: at}
	boards.mu.Unlock()
	h.UsersChanged(context.Background(), "daily", "2026-01-01", []string{"u"}) // queued, not yet written
	if err := sub.Move(context.Background(), "2026-01-02"); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	frames, _ := sub.Frames()
	if len(frames) == 0 {
		t.Fatal("no frame after the move")
	}
	for _, f := range frames {
		var v map[string]any
		_ = json.Unmarshal(f.Data, &v)
		if v["period"] != "2026-01-02" {
			t.Errorf("after the move to 2026-01-02 the stream writes %s %s (the old day's)", f.Event, f.Data)
		}
	}
}

// TestReconnectAfterAResetGetsTheNewPeriod: a client of the daily board's current period
// last got 2026-01-01's top at version 500 (a late write of the old day, applied after the
// new day's top was given version 450 when it was loaded: one counter per board). It
// reconnects after midnight with Last-Event-ID: 500; the stream follows 2026-01-02 now,
// and sends its snapshot (the client showed yesterday's board until today's top changed).
// A client that has today's newest version gets nothing again.
func TestReconnectAfterAResetGetsTheNewPeriod(t *testing.T) {
	clk := newClock()
	boards := &ownEntryBoards{tops: map[string]storage.Top{
		"2026-01-01": {Version: 500, Entries: []storage.Entry{{Rank: 1, UserID: "old", Score: 9}}},
		"2026-01-02": {Version: 450},
	}}
	h := NewHub(HubConfig{Window: time.Millisecond, Now: clk.now}, boards, nil)
	snapshots := func(last int64) int {
		sub, err := h.SubscribeFollowing(context.Background(), "u", "daily", "2026-01-02", last)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close(false)
		frames, _ := sub.Frames()
		n := 0
		for _, f := range frames {
			if f.Event == "leaderboard.updated" {
				n++
			}
		}
		return n
	}
	if n := snapshots(500); n != 1 {
		t.Errorf("reconnected with Last-Event-ID 500 (2026-01-01's) to the stream of 2026-01-02 (version 450): %d snapshots, want 1", n)
	}
	if n := snapshots(450); n != 0 {
		t.Errorf("reconnected with Last-Event-ID 450, the current version: %d snapshots, want none", n)
	}
}
