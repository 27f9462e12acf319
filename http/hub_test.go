package http

import (
	"context"
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

func TestHubKeepsOnlyTheNewestSnapshot(t *testing.T) {
	h := NewHub(HubConfig{Window: time.Millisecond}, fakeBoards{}, nil)
	c, err := h.register("u", "global:all_time", -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int64{1, 2, 5, 4, 3} {
		h.PublishTop("global", "all_time", v, []messages.Entry{{Rank: 1, UserID: "x", Score: v}})
	}
	top, _, _ := c.take(0)
	if top == nil || top.version != 5 {
		t.Fatalf("took %+v, want only version 5", top)
	}
	if top, _, _ := c.take(0); top != nil {
		t.Fatalf("second take returned version %d", top.version)
	}
	h.PublishTop("global", "all_time", 4, nil) // older than delivered: never sent
	if top, _, _ := c.take(0); top != nil {
		t.Fatalf("older version %d offered after 5", top.version)
	}
}

func TestHubWindowSpacesSnapshots(t *testing.T) {
	h := NewHub(HubConfig{Window: 200 * time.Millisecond}, fakeBoards{}, nil)
	c, _ := h.register("u", "global:all_time", -1)
	h.PublishTop("global", "all_time", 1, nil)
	first := time.Now()
	if top, _, _ := c.take(h.cfg.Window); top == nil {
		t.Fatal("first snapshot held back")
	}
	h.PublishTop("global", "all_time", 2, nil)
	top, _, wait := c.take(h.cfg.Window)
	if top != nil {
		// Only a stall of the test itself past the window may let it through.
		if since := time.Since(first); since < h.cfg.Window {
			t.Fatalf("second snapshot taken %v after the first, inside the %v window", since, h.cfg.Window)
		}
		return
	}
	if wait <= 0 || wait > 200*time.Millisecond {
		t.Fatalf("second snapshot held back for %v, want (0, 200ms]", wait)
	}
	time.Sleep(wait)
	if top, _, _ := c.take(h.cfg.Window); top == nil || top.version != 2 {
		t.Fatalf("after the window: %+v", top)
	}
}

func TestHubDropsClientsThatStayBehind(t *testing.T) {
	h := NewHub(HubConfig{MaxBehind: 50 * time.Millisecond}, fakeBoards{}, nil)
	slow, _ := h.register("slow", "global:all_time", -1)
	fast, _ := h.register("fast", "global:all_time", -1)
	h.PublishTop("global", "all_time", 1, nil)
	fast.take(0)
	time.Sleep(80 * time.Millisecond)
	h.PublishTop("global", "all_time", 2, nil)
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
	me, _ := h.register("me", "global:all_time", -1)
	other, _ := h.register("other", "global:all_time", -1)
	h.UsersChanged(context.Background(), "global", "all_time", []string{"me"})
	if _, users, _ := me.take(0); len(users) != 1 {
		t.Fatalf("own user events: %d", len(users))
	}
	if _, users, _ := other.take(0); len(users) != 0 {
		t.Fatalf("another user's stream got %d events", len(users))
	}
}

func TestHubNeverQueuesWhatAReconnectingClientHas(t *testing.T) {
	h := NewHub(HubConfig{}, fakeBoards{}, nil)
	c, _ := h.register("u", "global:all_time", 5) // Last-Event-ID: 5
	h.PublishTop("global", "all_time", 4, nil)
	h.PublishTop("global", "all_time", 5, nil)
	if top, _, _ := c.take(0); top != nil {
		t.Fatalf("queued version %d for a client at 5", top.version)
	}
	h.PublishTop("global", "all_time", 6, nil)
	if top, _, _ := c.take(0); top == nil || top.version != 6 {
		t.Fatalf("newer version not queued: %+v", top)
	}
}
