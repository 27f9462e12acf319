package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// testConfig is the default configuration (the shipped boards).
var testConfig, _ = configs.Load(func(string) string { return "" })

// TestApplyScoreRejectsPermanently: messages that can never apply fail with a
// PermanentError before touching any store (the stores here are nil).
func TestApplyScoreRejectsPermanently(t *testing.T) {
	a := NewApplyScore(nil, nil, nil, ApplyScoreConfig{Config: testConfig}, nil, slog.New(slog.DiscardHandler))
	defer a.Close()
	valid := messages.ScoreSubmitted{EventID: "e1", Board: "global", Period: "all_time", UserID: "u1", Value: 10, OccurredAt: time.Now()}
	with := func(f func(*messages.ScoreSubmitted)) []byte {
		c := valid
		f(&c)
		b, _ := json.Marshal(c)
		return b
	}
	cases := map[string][]byte{
		"not json":          []byte(`{"event_id":`),
		"not utf-8":         {0xff, 0xfe},
		"unknown field":     []byte(`{"event_id":"e1","board":"global","period":"all_time","user_id":"u1","value":1,"occurred_at":"2026-01-01T00:00:00Z","extra":1}`),
		"string value":      []byte(`{"event_id":"e1","board":"global","period":"all_time","user_id":"u1","value":"1","occurred_at":"2026-01-01T00:00:00Z"}`),
		"unknown board":     with(func(c *messages.ScoreSubmitted) { c.Board = "nope" }),
		"negative value":    with(func(c *messages.ScoreSubmitted) { c.Value = -1 }),
		"value over 2^53":   with(func(c *messages.ScoreSubmitted) { c.Value = configs.MaxExactScore + 1 }),
		"bad user id":       with(func(c *messages.ScoreSubmitted) { c.UserID = "a b" }),
		"missing event id":  with(func(c *messages.ScoreSubmitted) { c.EventID = "" }),
		"missing time":      with(func(c *messages.ScoreSubmitted) { c.OccurredAt = time.Time{} }),
		"period with a NUL": with(func(c *messages.ScoreSubmitted) { c.Period = "all\x00time" }),
		"another period":    with(func(c *messages.ScoreSubmitted) { c.Period = "2026-01-01" }),
	}
	for name, payload := range cases {
		err := a.Handle(message.NewMessage("m", payload))
		if err == nil || !IsPermanent(err) {
			t.Errorf("%s: got %v, want a permanent error", name, err)
		}
	}
	if _, err := a.decode(with(func(*messages.ScoreSubmitted) {})); err != nil {
		t.Fatalf("valid command rejected: %v", err)
	}
}

// fakeProjection fails any batch that holds a "bad" event (as PostgreSQL fails a whole
// transaction), panics on any batch with a "boom" event, and records what it applied.
type fakeProjection struct {
	mu      sync.Mutex
	applied []string
	batches int
	// rows has, per event applied, the outbox row it names.
	rows map[string]storage.OutboxRow
}

func (f *fakeProjection) Apply(_ context.Context, events []storage.ScoreEvent, _ storage.FoldFunc) (storage.AppliedBatch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches++
	for _, e := range events {
		switch e.UserID {
		case "bad":
			return storage.AppliedBatch{}, fmt.Errorf("apply: %w: SQLSTATE 22021", storage.ErrRejected)
		case "boom":
			panic("projection bug")
		case "down":
			return storage.AppliedBatch{}, fmt.Errorf("apply: %w: connection refused", storage.ErrUnavailable)
		}
	}
	out := storage.AppliedBatch{Fresh: make([]bool, len(events)), NewEvents: len(events)}
	for i, e := range events {
		if f.rows == nil {
			f.rows = map[string]storage.OutboxRow{}
		}
		f.rows[e.EventID] = e.Outbox
		f.applied = append(f.applied, e.UserID)
		out.Fresh[i] = true
		out.Entries = append(out.Entries, storage.EntryState{Board: e.Board, Period: e.Period, UserID: e.UserID, Score: e.Value, Version: 1})
	}
	return out, nil
}

type nopMirror struct{}

func (nopMirror) Reload(context.Context, storage.Target) (storage.Top, error) {
	return storage.Top{}, nil
}

func (nopMirror) CurrentTop(context.Context, storage.Target) (storage.Top, error) {
	return storage.Top{}, nil
}

func (nopMirror) Unhold(context.Context, string, string, string, string) error { return nil }

func (nopMirror) ApplyAll(_ context.Context, groups []storage.MirrorGroup, _ map[string]string) []storage.MirrorResult {
	return make([]storage.MirrorResult, len(groups))
}

// failingMirror fails the board periods in fail, finds nothing new in those in same (as
// Redis answers a write it has already), and changes the others' tops, as Redis answers
// each script of a pipeline on its own. CurrentTop answers a top of version 7.
type failingMirror struct {
	fail, same map[string]bool
	mu         sync.Mutex
	seen       []string // board/period of every group, in the order given
	read       []string // board/period of every CurrentTop
}

func (*failingMirror) Unhold(context.Context, string, string, string, string) error { return nil }

func (m *failingMirror) CurrentTop(_ context.Context, t storage.Target) (storage.Top, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.read = append(m.read, t.Board+"/"+t.Period)
	return storage.Top{Version: 7}, nil
}

func (m *failingMirror) ApplyAll(_ context.Context, groups []storage.MirrorGroup, _ map[string]string) []storage.MirrorResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]storage.MirrorResult, len(groups))
	for i, g := range groups {
		name := g.Target.Board + "/" + g.Target.Period
		m.seen = append(m.seen, name)
		switch {
		case m.fail[name]:
			out[i].Err = fmt.Errorf("apply entries: %w: i/o timeout", storage.ErrUnavailable)
		case !m.same[name]:
			out[i].Changed = true
		}
	}
	return out
}

func (*failingMirror) Reload(context.Context, storage.Target) (storage.Top, error) {
	return storage.Top{}, nil
}

// recordedChanges records the tops a batch reports changed (board/period@version) and
// the users it reports changed (board/period:users).
type recordedChanges struct {
	mu    sync.Mutex
	top   []string
	users []string
}

func (c *recordedChanges) TopChanged(board, period string, top storage.Top) {
	c.mu.Lock()
	c.top = append(c.top, fmt.Sprintf("%s/%s@%d", board, period, top.Version))
	c.mu.Unlock()
}

func (c *recordedChanges) UsersChanged(board, period string, users []string) {
	c.mu.Lock()
	c.users = append(c.users, fmt.Sprintf("%s/%s:%s", board, period, strings.Join(users, ",")))
	c.mu.Unlock()
}

// TestApplyScoreMirrorsEveryBoardOnceAndReportsWhatRedisTook: a batch's board periods go
// to the mirror in one call, each once, in the order first named; when Redis fails one,
// the batch fails (to be retried) but the tops Redis did take are reported changed, since
// the retry finds them mirrored and would not report them.
func TestApplyScoreMirrorsEveryBoardOnceAndReportsWhatRedisTook(t *testing.T) {
	mirror := &failingMirror{fail: map[string]bool{"points/all_time": true}}
	changes := &recordedChanges{}
	a := NewApplyScore(&fakeProjection{}, mirror, changes, ApplyScoreConfig{Config: testConfig, Workers: 1}, nil, slog.New(slog.DiscardHandler))
	defer a.Close()
	var events []storage.ScoreEvent
	for i, b := range []string{"global", "points", "global", "season"} {
		period := "all_time"
		if b == "season" {
			period = "1"
		}
		events = append(events, storage.ScoreEvent{EventID: fmt.Sprint("e", i), Board: b, Period: period, UserID: fmt.Sprint("u", i), Value: 1, OccurredAt: time.Now()})
	}
	_, err := a.apply(events)
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("a batch whose points board Redis failed: %v, want the failure", err)
	}
	if got, want := fmt.Sprint(mirror.seen), "[global/all_time points/all_time season/1]"; got != want {
		t.Errorf("mirrored %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(changes.top), "[global/all_time@0 season/1@0]"; got != want {
		t.Errorf("tops reported changed %s, want %s", got, want)
	}
}

// redeliveries is a projection that has applied every event before: it names their
// entries, and none is fresh.
type redeliveries struct{}

func (redeliveries) Apply(_ context.Context, events []storage.ScoreEvent, _ storage.FoldFunc) (storage.AppliedBatch, error) {
	out := storage.AppliedBatch{Fresh: make([]bool, len(events))}
	for _, e := range events {
		out.Entries = append(out.Entries, storage.EntryState{Board: e.Board, Period: e.Period, UserID: e.UserID, Score: e.Value, Version: 1})
	}
	return out, nil
}

// TestApplyScoreTellsARedeliveredBatchAgain: when a redelivered batch finds Redis holding
// its entries already (an earlier attempt mirrored them, then failed or lost its answer),
// the board's current top and the batch's users are told again, since that attempt may
// not have told them; a board Redis changes is told as usual, without a read.
func TestApplyScoreTellsARedeliveredBatchAgain(t *testing.T) {
	mirror := &failingMirror{same: map[string]bool{"global/all_time": true}}
	changes := &recordedChanges{}
	a := NewApplyScore(redeliveries{}, mirror, changes, ApplyScoreConfig{Config: testConfig, Workers: 1}, nil, slog.New(slog.DiscardHandler))
	defer a.Close()
	events := []storage.ScoreEvent{
		{EventID: "e1", Board: "global", Period: "all_time", UserID: "ann", Value: 1, OccurredAt: time.Now()},
		{EventID: "e2", Board: "points", Period: "all_time", UserID: "bob", Value: 1, OccurredAt: time.Now()},
	}
	if _, err := a.apply(events); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(mirror.read), "[global/all_time]"; got != want {
		t.Errorf("current tops read %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(changes.top), "[global/all_time@7 points/all_time@0]"; got != want {
		t.Errorf("tops told %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(changes.users), "[global/all_time:ann points/all_time:bob]"; got != want {
		t.Errorf("users told %s, want %s", got, want)
	}
}

// TestApplyScoreSplitsFailingBatches: one event PostgreSQL rejects, one that panics, or a
// message that does not decode, fails alone (permanently, so it is dead-lettered) and
// every other event of its batch is applied; an unreachable store fails the events
// without splitting and without making them permanent.
func TestApplyScoreSplitsFailingBatches(t *testing.T) {
	proj := &fakeProjection{}
	release, entered := make(chan struct{}), make(chan struct{})
	hold := &holdProjection{inner: proj, release: release, entered: entered}
	a := NewApplyScore(hold, nopMirror{}, nil, ApplyScoreConfig{Config: testConfig, Workers: 1, MaxBatch: 64}, nil, slog.New(slog.DiscardHandler))
	defer a.Close()
	msgOf := func(u string) *message.Message {
		if u == "garbage" {
			return message.NewMessage(u, []byte(`{"event_id":`))
		}
		body, _ := json.Marshal(messages.ScoreSubmitted{EventID: "e-" + u, Board: "global", Period: "all_time", UserID: u, Value: 10, OccurredAt: time.Now()})
		return message.NewMessage(u, body)
	}
	// The only worker holds a batch of one: every event below queues behind it.
	held := make(chan error, 1)
	go func() { held <- a.Handle(msgOf("holder")) }()
	<-entered

	users := []string{"u1", "bad", "u2", "garbage", "boom", "u3"}
	errs := make(map[string]error)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := a.Handle(msgOf(u))
			mu.Lock()
			errs[u] = err
			mu.Unlock()
		}()
	}
	for a.batcher.Queued() < len(users) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}

	for _, u := range []string{"u1", "u2", "u3"} {
		if errs[u] != nil {
			t.Errorf("%s shared a batch with failing events and failed: %v", u, errs[u])
		}
	}
	if err := errs["bad"]; !IsPermanent(err) || !errors.Is(err, storage.ErrRejected) {
		t.Errorf("rejected event: %v, want a permanent error", err)
	}
	if err := errs["garbage"]; !IsPermanent(err) || errors.Is(err, storage.ErrRejected) {
		t.Errorf("undecodable message: %v, want a permanent decode error", err)
	}
	var panicked middleware.RecoveredPanicError
	if err := errs["boom"]; !errors.As(err, &panicked) {
		t.Errorf("panicking event: %v, want a recovered panic", err)
	}
	proj.mu.Lock()
	applied := strings.Join(proj.applied, ",")
	proj.mu.Unlock()
	for _, u := range []string{"u1", "u2", "u3"} {
		if strings.Count(applied, u) != 1 {
			t.Errorf("applied %q: %s applied %d times, want once", applied, u, strings.Count(applied, u))
		}
	}

	// An unreachable store fails each event with a transient error, in one attempt.
	before := proj.batches
	body, _ := json.Marshal(messages.ScoreSubmitted{EventID: "e-down", Board: "global", Period: "all_time", UserID: "down", Value: 1, OccurredAt: time.Now()})
	if err := a.Handle(message.NewMessage("down", body)); err == nil || IsPermanent(err) || !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("unreachable store: %v, want a transient error", err)
	}
	if proj.batches != before+1 {
		t.Errorf("unreachable store: %d attempts, want 1", proj.batches-before)
	}
}

// holdProjection blocks its first batch until release is closed.
type holdProjection struct {
	inner            ScoreProjection
	release, entered chan struct{}
	once             sync.Once
}

func (h *holdProjection) Apply(ctx context.Context, events []storage.ScoreEvent, fold storage.FoldFunc) (storage.AppliedBatch, error) {
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.entered)
		<-h.release
		return storage.AppliedBatch{Fresh: make([]bool, len(events))}, nil
	}
	return h.inner.Apply(ctx, events, fold)
}

// TestApplyScorePassesTheRowName: the outbox row a message's metadata names goes with its
// events to the projection (which deletes the row as it applies them); a message whose
// metadata names none, or names one wrongly, goes without.
func TestApplyScorePassesTheRowName(t *testing.T) {
	proj := &fakeProjection{}
	a := NewApplyScore(proj, nopMirror{}, nil, ApplyScoreConfig{Config: testConfig, Workers: 1}, nil, slog.New(slog.DiscardHandler))
	defer a.Close()
	for _, c := range []struct{ id, row string }{{"named", "1:77:5"}, {"unnamed", ""}, {"misnamed", "1:77"}} {
		body, _ := json.Marshal(messages.ScoreSubmitted{EventID: c.id, Board: "global", Period: "all_time", UserID: "u-" + c.id, Value: 10, OccurredAt: time.Now()})
		msg := message.NewMessage(c.id, body)
		if c.row != "" {
			msg.Metadata.Set(messages.MetaOutboxRow, c.row)
		}
		if err := a.Handle(msg); err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
	}
	proj.mu.Lock()
	defer proj.mu.Unlock()
	if got, want := proj.rows["named"], (storage.OutboxRow{Shard: 1, TxID: "77", Offset: 5}); got != want {
		t.Errorf("named: the events name row %+v, want %+v", got, want)
	}
	for _, id := range []string{"unnamed", "misnamed"} {
		if got, ok := proj.rows[id]; !ok || got != (storage.OutboxRow{}) {
			t.Errorf("%s: applied %v, names row %+v; want applied without a row", id, ok, got)
		}
	}
}

// unloadedMirror holds no board period: every apply answers ErrNotLoaded. Its loads wait
// until together reloads are in flight at once (or give up after a while), and a load of
// the board named panics does.
type unloadedMirror struct {
	nopMirror
	together int
	panics   string
	mu       sync.Mutex
	inFlight int
	arrived  chan struct{}
	loaded   []string
}

func (m *unloadedMirror) ApplyAll(_ context.Context, groups []storage.MirrorGroup, _ map[string]string) []storage.MirrorResult {
	out := make([]storage.MirrorResult, len(groups))
	for i := range out {
		out[i].Err = storage.ErrNotLoaded
	}
	return out
}

func (m *unloadedMirror) Reload(_ context.Context, t storage.Target) (storage.Top, error) {
	m.mu.Lock()
	m.inFlight++
	if m.inFlight == m.together {
		close(m.arrived)
	}
	m.mu.Unlock()
	select {
	case <-m.arrived:
	case <-time.After(5 * time.Second):
		return storage.Top{}, fmt.Errorf("load of %s: the loads came one at a time", t.Board)
	}
	if t.Board == m.panics {
		panic("load failed: " + t.Board)
	}
	m.mu.Lock()
	m.loaded = append(m.loaded, t.Board)
	m.mu.Unlock()
	return storage.Top{Version: 9}, nil
}

// TestApplyScoreLoadsNewPeriodsSideBySide: the board periods of a batch that Redis does not
// hold (new matches) are loaded from PostgreSQL side by side, not one after another (which
// held a match-heavy batch back by a second); each is told as changed. A load that panics
// fails the batch as a panic does (the poison queue takes it), not the process.
func TestApplyScoreLoadsNewPeriodsSideBySide(t *testing.T) {
	var events []storage.ScoreEvent
	for i := range 6 {
		events = append(events, storage.ScoreEvent{EventID: fmt.Sprint("e", i), Board: fmt.Sprint("match:m", i), Period: "all_time", UserID: "ann", Value: 1, OccurredAt: time.Now()})
	}
	mirror := &unloadedMirror{together: 6, arrived: make(chan struct{})}
	changes := &recordedChanges{}
	a := NewApplyScore(redeliveries{}, mirror, changes, ApplyScoreConfig{Config: testConfig, Workers: 1}, nil, slog.New(slog.DiscardHandler))
	defer a.Close()
	if _, err := a.apply(events); err != nil {
		t.Fatal(err)
	}
	if len(mirror.loaded) != 6 || len(changes.top) != 6 {
		t.Fatalf("loaded %v, tops told %v; want all 6 matches", mirror.loaded, changes.top)
	}

	mirror = &unloadedMirror{together: 2, panics: "match:m1", arrived: make(chan struct{})}
	a2 := NewApplyScore(redeliveries{}, mirror, nil, ApplyScoreConfig{Config: testConfig, Workers: 1}, nil, slog.New(slog.DiscardHandler))
	defer a2.Close()
	var recovered middleware.RecoveredPanicError
	if _, err := a2.safeApply(events[:2]); !errors.As(err, &recovered) {
		t.Fatalf("a load that panics: %v, want the batch failed as a panic", err)
	}
}

// renaming is a projection whose batch renames its user: it names the entry the event
// wrote, and the user's entries on two past matches only for the new nick name.
type renaming struct{}

func (renaming) Apply(_ context.Context, events []storage.ScoreEvent, _ storage.FoldFunc) (storage.AppliedBatch, error) {
	out := storage.AppliedBatch{Fresh: []bool{true}, NewEvents: 1, NickNames: map[string]string{"ann": "Annie"}}
	e := events[0]
	out.Entries = append(out.Entries, storage.EntryState{Board: e.Board, Period: e.Period, UserID: e.UserID, Score: e.Value, Version: 1})
	for _, m := range []string{"match:old1", "match:old2"} {
		out.Entries = append(out.Entries, storage.EntryState{Board: m, Period: "all_time", UserID: e.UserID, Score: 3, Version: 2, NameOnly: true})
	}
	return out, nil
}

// TestApplyScoreLoadsNoPeriodForANameAlone: a rename names every entry of its user so that
// the periods Redis holds show the new name; the periods Redis does not hold (old matches
// whose keys expired) are not loaded for it, as a load reads the name anyway: a player of
// many matches would have loaded every one. The entry the event wrote is loaded as ever.
func TestApplyScoreLoadsNoPeriodForANameAlone(t *testing.T) {
	mirror := &unloadedMirror{together: 1, arrived: make(chan struct{})}
	a := NewApplyScore(renaming{}, mirror, &recordedChanges{}, ApplyScoreConfig{Config: testConfig, Workers: 1}, nil, slog.New(slog.DiscardHandler))
	defer a.Close()
	events := []storage.ScoreEvent{{EventID: "e1", Board: "match:new", Period: "all_time", UserID: "ann", Value: 1, OccurredAt: time.Now()}}
	if _, err := a.apply(events); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(mirror.loaded); got != "[match:new]" {
		t.Fatalf("loaded %s, want only [match:new]", got)
	}
}
