package http

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// appliedLog says every event is applied (PostgreSQL has it).
type appliedLog struct{}

func (appliedLog) LookupRequest(context.Context, string, string) ([]byte, error) {
	return nil, storage.ErrNotFound
}
func (appliedLog) IsApplied(context.Context, string, string) (bool, error) { return true, nil }

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
	mirror := &laggingMirror{staleReads: 3, old: 500, new: 800}
	s := &server{Deps: Deps{Requests: appliedLog{}, Boards: mirror, WaitTimeout: 5 * time.Second}}
	cur, ok := s.waitApplied(context.Background(), "ev", "global", "u", 800)
	if !ok || cur.Score != 800 || cur.Rank != 1 {
		t.Fatalf("waitApplied = %+v, %v; want the new entry (800, rank 1)", cur, ok)
	}

	never := &laggingMirror{staleReads: 1 << 30, old: 500}
	s = &server{Deps: Deps{Requests: appliedLog{}, Boards: never, WaitTimeout: 200 * time.Millisecond}}
	if cur, ok := s.waitApplied(context.Background(), "ev", "global", "u", 800); ok {
		t.Fatalf("waitApplied answered %+v although Redis never showed the score", cur)
	}
}
