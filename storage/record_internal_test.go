package storage

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestRecordRoundTrip: a record gives back the value, version and times it was made from,
// on desc and asc boards, for values a sorted-set score cannot hold exactly too.
func TestRecordRoundTrip(t *testing.T) {
	reached := time.Date(2026, 11, 23, 10, 0, 0, 123456000, time.UTC)
	values := []int64{0, 1, -1, 42, 1 << 53, 1<<53 + 1, -(1<<53 + 1), math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, math.MinInt64 + 1}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		values = append(values, int64(r.Uint64()))
	}
	for _, v := range values {
		for _, desc := range []bool{true, false} {
			for _, upd := range []time.Duration{0, time.Microsecond, -5 * time.Microsecond, 90 * 24 * time.Hour} {
				s := EntryState{UserID: "u-1", Score: v, SortKey: v, Version: 1 + int64(r.Uint64()>>24), ReachedAt: reached, UpdatedAt: reached.Add(upd)}
				if !desc {
					s.SortKey = -v
				}
				rec := entryRecord(s)
				// Redis holds the sort key as a double and answers it in its own spelling.
				got, err := decodeRecord("u-1", rec, float64(s.SortKey))
				if err != nil {
					t.Fatalf("value %d desc %v: %v", v, desc, err)
				}
				if got.score != v || got.version != s.Version || !got.reached.Equal(reached) || !got.updated.Equal(s.UpdatedAt) ||
					got.member != redisMember("u-1", reached) {
					t.Fatalf("value %d desc %v updated %v: got %+v", v, desc, upd, got)
				}
			}
		}
	}
	if _, err := decodeRecord("u-1", "short", 1); err == nil {
		t.Error("a malformed record was read")
	}
	if rec := entryRecord(EntryState{Score: 5, SortKey: 5, Version: 3, ReachedAt: reached, UpdatedAt: reached}); len(rec) != 11 {
		t.Errorf("a small entry's record takes %d bytes, want 11", len(rec))
	}
}

// TestPositionSpellings: a position's member and the sorted set's are the same place.
func TestPositionSpellings(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	p := Position{SortKey: 7, Member: Member("user:1", at)}
	m, err := p.redis()
	if err != nil || m != redisMember("user:1", at) || positionMember(m) != p.Member {
		t.Fatalf("redis() = %q, %v; positionMember back = %q, want %q", m, err, positionMember(m), p.Member)
	}
	if _, err := (Position{Member: "zz:u"}).redis(); err == nil {
		t.Error("a malformed position was accepted")
	}
}
