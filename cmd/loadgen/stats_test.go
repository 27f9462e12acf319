package main

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	var l latencies
	for i := 1; i <= 100; i++ {
		l.add(time.Duration(101-i) * time.Millisecond)
	}
	s := l.summary()
	if s.Count != 100 || s.P50 != 50 || s.P95 != 95 || s.P99 != 99 || s.Max != 100 || s.Mean != 50.5 {
		t.Fatalf("summary = %+v", s)
	}
	if got := (&latencies{}).summary(); got != (summary{}) {
		t.Fatalf("empty summary = %+v", got)
	}
}

func TestUsersNextAlwaysImproves(t *testing.T) {
	u := newUsers(3, "bench-u-")
	if u.names[2] != "bench-u-000002" {
		t.Fatalf("name = %q", u.names[2])
	}
	held := map[int32]bool{}
	for range 3 {
		id, ok := u.acquire()
		if !ok || held[id] {
			t.Fatalf("acquire = %d, %v (held %v)", id, ok, held)
		}
		held[id] = true
	}
	if _, ok := u.acquire(); ok {
		t.Fatal("acquire succeeded with every user held")
	}
	u.release(1)
	prev := int64(0)
	for range 1000 {
		s := u.next(1)
		if s-prev < 1 || s-prev > 100 {
			t.Fatalf("next step %d -> %d", prev, s)
		}
		prev = s
	}
}

// TestLatenciesAndLedgerKeepEverySample: samples and events added across many chunks (as
// many as 15 minutes at 5,000/s fill) all come back, in the order added.
func TestLatenciesAndLedgerKeepEverySample(t *testing.T) {
	var l latencies
	var g ledger
	n := maxChunk*70 + 7 // more chunks than a shift of 256 by their count can size
	for i := range n {
		l.add(time.Duration(i))
		g.add(event{user: int32(i), outcome: accepted, kind: kindBest})
	}
	got := l.all()
	events := g.all()
	if len(got) != n || len(events) != n {
		t.Fatalf("%d samples and %d events back; want %d", len(got), len(events), n)
	}
	for i := range n {
		if got[i] != time.Duration(i) || events[i].user != int32(i) {
			t.Fatalf("sample %d = %v, event %d = user %d", i, got[i], i, events[i].user)
		}
	}
	if want, maybe := g.pipelineRows(); want != int64(n) || maybe != 0 {
		t.Fatalf("pipelineRows = %d, %d; want %d, 0", want, maybe, n)
	}
	if s := l.summary(); s.Count != n || s.Max != ms(time.Duration(n-1)) {
		t.Fatalf("summary = %+v", s)
	}
}
