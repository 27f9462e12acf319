package http

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// appliedLog says every event is applied (PostgreSQL has it), to period all_time.
type appliedLog struct{}

func (appliedLog) Check(context.Context, string, string, []byte) (storage.AcceptOutcome, error) {
	return 0, storage.ErrNotFound
}
func (appliedLog) RecordUnchanged(_ context.Context, _, _, _, period string, _ []byte, _ time.Time) (storage.AcceptOutcome, bool, string, error) {
	return storage.Accepted, true, period, nil
}
func (appliedLog) WasUnchanged(context.Context, string, string) (bool, string, error) {
	return false, "", nil
}
func (appliedLog) IsApplied(context.Context, string, string) (bool, error) { return true, nil }
func (appliedLog) Pending(context.Context, string, string, string, string) (bool, error) {
	return false, nil
}
func (appliedLog) AppliedIn(context.Context, string, string, string) (storage.Applied, bool, error) {
	return storage.Applied{Period: "all_time"}, true, nil
}

func (appliedLog) AcceptedAgo(context.Context, string, string) (time.Duration, error) {
	return 0, storage.ErrNotFound
}

// versionedLog says every event is applied, with the user's entry at version in PostgreSQL.
type versionedLog struct {
	appliedLog
	version int64
}

func (l versionedLog) AppliedIn(context.Context, string, string, string) (storage.Applied, bool, error) {
	return storage.Applied{Period: "all_time", Version: l.version}, true, nil
}

// staleVersionMirror is Redis showing the user's previous increment, accepted in the same
// microsecond as the one waited for (so its update time is the same), for the first reads:
// version 4 with 10 points, then version 5 with 17.
type staleVersionMirror struct {
	fakeBoards
	reads      atomic.Int32
	staleReads int32
	at         time.Time
}

func (m *staleVersionMirror) User(context.Context, string, string, string) (storage.Entry, error) {
	if m.reads.Add(1) <= m.staleReads {
		return storage.Entry{UserID: "u", Score: 10, Rank: 2, UpdatedAt: m.at, Version: 4}, nil
	}
	return storage.Entry{UserID: "u", Score: 17, Rank: 1, UpdatedAt: m.at, Version: 5}, nil
}

// TestWaitAppliedTellsIncrementsApartByVersion: an increment's wait does not answer the
// user's previous increment that Redis still shows with the same update time; it waits
// until Redis holds the version PostgreSQL gave the entry.
func TestWaitAppliedTellsIncrementsApartByVersion(t *testing.T) {
	cfg, _ := configs.Load(func(string) string { return "" })
	var points configs.Board
	for _, b := range configs.DefaultBoards() {
		if b.Operator == configs.OpIncr {
			points = b
		}
	}
	if points.ID == "" {
		t.Fatal("no increment board among the default boards")
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	w := submit{Board: points, UserID: "u", EventID: "ev-2", Value: 7}
	res := submitted{Period: "all_time", At: at}
	mirror := &staleVersionMirror{staleReads: 3, at: at}
	s := submission{requests: versionedLog{version: 5}, reads: NewReads(cfg, NewPeriods(cfg, nil, nil), mirror, nil, nil)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cur, _, ok := s.WaitApplied(ctx, w, res)
	if !ok || cur.Score != 17 || cur.Version != 5 {
		t.Fatalf("WaitApplied = %+v, %v; want the entry at version 5 (17 points), not the previous increment's", cur, ok)
	}
}

// laggingMirror is Redis behind PostgreSQL: it shows the user's old score for the first
// reads, then the new one.
type laggingMirror struct {
	fakeBoards
	reads      atomic.Int32
	staleReads int32
	old, new   int64
}

func (m *laggingMirror) User(context.Context, string, string, string) (storage.Entry, error) {
	if m.reads.Add(1) <= m.staleReads {
		return storage.Entry{UserID: "u", Score: m.old, Rank: 3}, nil
	}
	return storage.Entry{UserID: "u", Score: m.new, Rank: 1}, nil
}

// TestWaitAppliedWaitsForRedis: ?wait=true answers "applied" with the entry Redis shows
// once it holds the submitted score, not the old entry it shows while the projector has
// written PostgreSQL but not yet Redis; when Redis never catches up, it gives up (202).
func TestWaitAppliedWaitsForRedis(t *testing.T) {
	cfg, _ := configs.Load(func(string) string { return "" })
	w := submit{Board: configs.DefaultBoards()[0], UserID: "u", EventID: "ev", Value: 800}
	res := submitted{Period: "all_time", At: time.Now()}
	periods := NewPeriods(cfg, nil, nil)
	mirror := &laggingMirror{staleReads: 3, old: 500, new: 800}
	s := submission{requests: appliedLog{}, reads: NewReads(cfg, periods, mirror, nil, nil)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cur, _, ok := s.WaitApplied(ctx, w, res)
	if !ok || cur.Score != 800 || cur.Rank != 1 {
		t.Fatalf("WaitApplied = %+v, %v; want the new entry (800, rank 1)", cur, ok)
	}

	never := &laggingMirror{staleReads: 1 << 30, old: 500}
	s = submission{requests: appliedLog{}, reads: NewReads(cfg, periods, never, nil, nil)}
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if cur, _, ok := s.WaitApplied(ctx, w, res); ok {
		t.Fatalf("WaitApplied answered %+v although Redis never showed the score", cur)
	}
}
