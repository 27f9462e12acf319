package http

import (
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// userEntries is PostgreSQL's view of one user's entries.
type userEntries []storage.UserEntry

func (userEntries) Get(context.Context, string) (storage.Ban, error) { return storage.Ban{}, nil }
func (e userEntries) Entries(context.Context, string) ([]storage.UserEntry, error) {
	return e, nil
}

// syncingMirror is Redis behind PostgreSQL after a ban or an unban: for the first
// staleReads reads it shows the user's entry as it was before (shown while banned, or
// missing while unbanned), then as it is.
type syncingMirror struct {
	fakeBoards
	reads      atomic.Int32
	staleReads int32
	shown      bool // whether the entry shows once Redis caught up
}

func (m *syncingMirror) User(context.Context, string, string, string) (storage.Entry, error) {
	shown := m.shown
	if m.reads.Add(1) <= m.staleReads {
		shown = !shown
	}
	if !shown {
		return storage.Entry{}, storage.ErrNotFound
	}
	return storage.Entry{UserID: "u", Score: 30, Rank: 1}, nil
}

// TestModerationWaitsForRedis: a ban or an unban answered with wait=true waits until
// Redis shows the user's entries as PostgreSQL holds them (hidden ones gone, visible ones
// there with their score), not only until the projector committed the sync to PostgreSQL
// (appliedLog: it has); when Redis never catches up, it gives up (202).
func TestModerationWaitsForRedis(t *testing.T) {
	cfg, _ := configs.Load(func(string) string { return "" })
	periods := NewPeriods(cfg, nil, nil)
	for _, c := range []struct {
		name   string
		hidden bool
	}{{"ban", true}, {"unban", false}} {
		mirror := &syncingMirror{staleReads: 3, shown: !c.hidden}
		s := &server{Deps: Deps{Config: cfg, Requests: appliedLog{}, Reads: NewReads(cfg, periods, mirror, nil, nil), WaitTimeout: 5 * time.Second,
			Moderation: Moderation{BanStore: userEntries{{Board: "global", Period: "all_time", Score: 30, Hidden: c.hidden}}}}}
		if !s.poll(context.Background(), s.synced("u", "ev")) || mirror.reads.Load() <= mirror.staleReads {
			t.Errorf("%s: the wait answered after %d reads, want after Redis caught up (%d stale reads)", c.name, mirror.reads.Load(), mirror.staleReads)
		}

		never := &syncingMirror{staleReads: 1 << 30, shown: !c.hidden}
		s.Reads = NewReads(cfg, periods, never, nil, nil)
		s.WaitTimeout = 200 * time.Millisecond
		if s.poll(context.Background(), s.synced("u", "ev")) {
			t.Errorf("%s: the wait answered although Redis never caught up", c.name)
		}
	}

	// A visible entry whose score Redis does not show yet is not mirrored either.
	stale := &syncingMirror{shown: true}
	s := &server{Deps: Deps{Config: cfg, Requests: appliedLog{}, Reads: NewReads(cfg, periods, stale, nil, nil), WaitTimeout: 200 * time.Millisecond,
		Moderation: Moderation{BanStore: userEntries{{Board: "global", Period: "all_time", Score: 31}}}}}
	if s.poll(context.Background(), s.synced("u", "ev")) {
		t.Error("the wait answered although Redis shows another score")
	}
}

// acceptAs answers every admin command with one outcome.
type acceptAs storage.AcceptOutcome

func (a acceptAs) AcceptWith(context.Context, storage.Command, func(context.Context, *sql.Tx) error) (storage.AcceptOutcome, error) {
	return storage.AcceptOutcome(a), nil
}

// holdSet records the holds of one user as a set of event ids, as storage.Boards does.
type holdSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

func newHoldSet(ids ...string) *holdSet {
	h := &holdSet{ids: map[string]bool{}}
	for _, id := range ids {
		h.ids[id] = true
	}
	return h
}

func (h *holdSet) Hold(_ context.Context, _, _, _, id string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	added := !h.ids[id]
	h.ids[id] = true
	return added, nil
}

func (h *holdSet) Unhold(_ context.Context, _, _, _, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.ids, id)
	return nil
}

func (h *holdSet) held(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ids[id]
}

// unappliedLog says no event is applied yet.
type unappliedLog struct{ appliedLog }

func (unappliedLog) IsApplied(context.Context, string, string) (bool, error) { return false, nil }
func (unappliedLog) Pending(context.Context, string, string, string, string) (bool, error) {
	return true, nil
}

// TestModerationNotAcceptedTakesItsHoldOut: an admin command answered 409, or a retry of
// one accepted and applied before, takes its id out of the user's hold; a retry of one
// still on its way (its id holding already) leaves it, for the projector to take out once
// it applies it.
func TestModerationNotAcceptedTakesItsHoldOut(t *testing.T) {
	cfg, _ := configs.Load(func(string) string { return "" })
	for _, c := range []struct {
		name    string
		outcome storage.AcceptOutcome
		before  *holdSet
		log     RequestLog
		want    bool // still held by adj-1
	}{
		{"accepted", storage.Accepted, newHoldSet(), appliedLog{}, true},
		{"409", storage.Conflict, newHoldSet(), appliedLog{}, false},
		{"a retry of one applied", storage.Duplicate, newHoldSet(), appliedLog{}, false},
		{"a retry of one on its way", storage.Duplicate, newHoldSet("adj-1"), unappliedLog{}, true},
		{"a retry of one on its way, released meanwhile (a race)", storage.Duplicate, newHoldSet(), unappliedLog{}, true},
	} {
		s := &server{Deps: Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Requests: c.log, Moderation: Moderation{Commands: acceptAs(c.outcome), Holds: c.before}}}
		r := httptest.NewRequest(http.MethodPost, "/admin/boards/global/entries/u/adjust", nil)
		r = r.WithContext(context.WithValue(r.Context(), claimsKey{}, &Claims{}))
		w := httptest.NewRecorder()
		s.moderate(w, r, messages.ScoreSubmitted{Op: messages.OpAdjust, EventID: "adj-1", Board: "global", Period: "all_time", UserID: "u", Value: 3}, "", "entry.adjust", "fix", nil)
		if got := c.before.held("adj-1"); got != c.want {
			t.Errorf("%s (%d): held by adj-1 %v, want %v", c.name, w.Code, got, c.want)
		}
	}
}

// raceAccept is the command log under two requests of one admin command (a client's
// retry while the first request still runs): the first to reach it waits, and loses the
// insert of the event id to the second (Duplicate); the second is Accepted.
type raceAccept struct {
	calls            atomic.Int32
	entered, release chan struct{}
}

func (a *raceAccept) AcceptWith(context.Context, storage.Command, func(context.Context, *sql.Tx) error) (storage.AcceptOutcome, error) {
	if a.calls.Add(1) == 1 {
		close(a.entered)
		<-a.release
		return storage.Duplicate, nil
	}
	return storage.Accepted, nil
}

// TestModerationRetryRacingItsFirstRequestKeepsTheHold: request 1 of an adjustment holds
// the user (its id is new: added) and waits on PostgreSQL; request 2, the client's retry
// with the same event id, finds the id holding (not added) and is the one whose insert is
// Accepted; request 1 then finds the event id recorded: Duplicate, with added set. It
// took the id out of the hold, though the command was accepted and not applied: a best
// score was answered "unchanged" against the entry Redis still showed, which the
// adjustment on its way lowers or removes (what the hold is for). Found by a review.
func TestModerationRetryRacingItsFirstRequestKeepsTheHold(t *testing.T) {
	cfg, _ := configs.Load(func(string) string { return "" })
	holds := newHoldSet()
	cmds := &raceAccept{entered: make(chan struct{}), release: make(chan struct{})}
	s := &server{Deps: Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Requests: unappliedLog{}, Moderation: Moderation{Commands: cmds, Holds: holds}}}
	send := func() int {
		r := httptest.NewRequest(http.MethodPost, "/admin/boards/global/entries/u/adjust", nil)
		r = r.WithContext(context.WithValue(r.Context(), claimsKey{}, &Claims{}))
		w := httptest.NewRecorder()
		s.moderate(w, r, messages.ScoreSubmitted{Op: messages.OpAdjust, EventID: "adj-1", Board: "global", Period: "all_time", UserID: "u", Value: 3}, "", "entry.adjust", "fix", nil)
		return w.Code
	}
	first := make(chan int, 1)
	go func() { first <- send() }()
	<-cmds.entered // request 1 holds the user and waits for PostgreSQL
	if code := send(); code != http.StatusAccepted {
		t.Fatalf("request 2: %d, want 202", code)
	}
	close(cmds.release)
	if code := <-first; code != http.StatusAccepted {
		t.Fatalf("request 1: %d, want 202 (a retry answered as the first time)", code)
	}
	if !holds.held("adj-1") {
		t.Errorf("the adjustment adj-1 is accepted and on its way (not applied), but its id no longer holds the user")
	}
}

// TestRemovalWithAnEmptyReason: API.md's removal (DELETE
// /admin/boards/{board_id}/entries/{user_id}?period=) names no reason, so a removal is taken
// without one, and with the parameter empty (?reason=, as a client or form that always
// sends it does) too, as the season start's optional reason treats "" as none.
func TestRemovalWithAnEmptyReason(t *testing.T) {
	cfg, _ := configs.Load(func(string) string { return "" })
	s := &server{Deps: Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Now: time.Now, Requests: appliedLog{},
		Periods: NewPeriods(cfg, nil, nil),
		Moderation: Moderation{Commands: acceptAs(storage.Accepted),
			BanStore: userEntries{{Board: "global", Period: "all_time", Score: 30}}}}}
	rt := chi.NewRouter()
	rt.Delete("/admin/boards/{board_id}/entries/{user_id}", s.handleRemove())
	for _, q := range []string{"", "?reason="} {
		r := httptest.NewRequest(http.MethodDelete, "/admin/boards/global/entries/u"+q, nil)
		r = r.WithContext(context.WithValue(r.Context(), claimsKey{}, &Claims{}))
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, r)
		if w.Code != http.StatusAccepted {
			t.Errorf("DELETE /admin/boards/global/entries/u%s: %d %s, want 202", q, w.Code, w.Body.String())
		}
	}
}
