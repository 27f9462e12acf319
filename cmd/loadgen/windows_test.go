package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWindowsCountAndReport(t *testing.T) {
	start := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	w := newWindows(start, 35*time.Second, 10*time.Second) // 3 full windows; the last 5 s go with what comes after
	for _, off := range []time.Duration{0, 1, 9999 * time.Millisecond, 10 * time.Second, 29 * time.Second, 30 * time.Second, 40 * time.Second} {
		w.accept(start.Add(off), off/10)
	}
	if got := []int64{w.accepted[0].Load(), w.accepted[1].Load(), w.accepted[2].Load(), w.accepted[3].Load()}; !slices.Equal(got, []int64{3, 1, 1, 2}) {
		t.Fatalf("accepted per window = %v, want [3 1 1 2]", got)
	}
	if w.report() != nil {
		t.Fatal("a report before the applied rows were measured")
	}
	copy(w.applied, []int64{3, 0, 1, 4})
	w.measured = true
	r := w.report()
	if len(r.Windows) != 3 || r.Windows[1].StartS != 10 || r.Windows[1].Accepted != 1 || r.Windows[1].Applied != 0 {
		t.Fatalf("windows = %+v", r.Windows)
	}
	if p99s := []float64{r.Windows[0].AcceptP99Ms, r.Windows[1].AcceptP99Ms, r.Windows[2].AcceptP99Ms}; !slices.Equal(p99s, []float64{999.9, 1000, 2900}) {
		t.Fatalf("accept p99 per window = %v, want [999.9 1000 2900] (each window's own answers)", p99s)
	}
	if r.WorstRatio != 0 || r.WorstStartS != 10 || r.AfterAccepted != 2 || r.AfterApplied != 4 {
		t.Fatalf("report = %+v, want the worst window at 10s with ratio 0, 2 accepted and 4 applied after", r)
	}
	// A window that accepted nothing cannot be the worst; applying a backlog counts over 1.
	w.accepted[1].Store(0)
	copy(w.applied, []int64{2, 5, 1, 4})
	if r := w.report(); r.WorstRatio != 2.0/3 || r.WorstStartS != 0 {
		t.Fatalf("worst = %v at %vs, want 2/3 at 0s", r.WorstRatio, r.WorstStartS)
	}
}

func TestJudge(t *testing.T) {
	good := func() writeReport {
		return writeReport{
			OfferedRate: 2000, Issued: 20000, ErrorsTotal: 199,
			AcceptLatency: summary{P99: 99.9}, AnswerLatency: summary{P99: 99.9}, Visibility: summary{P95: 999},
			Windows: &windowsReport{SizeS: 10, Windows: []windowReport{{Accepted: 10000, Applied: 9000}, {Accepted: 10000, Applied: 10000}}, WorstRatio: 0.9},
		}
	}
	if h := judge(good()); !h.Holds || len(h.Failed) != 0 {
		t.Fatalf("judge(good) = %+v, want holds", h)
	}
	cases := map[string]func(*writeReport){
		"applied 89.9 %":   func(r *writeReport) { r.Windows.WorstRatio = 0.899 },
		"accept p99 100.0": func(r *writeReport) { r.AcceptLatency.P99 = 100 },
		// the 202s fast, the 1 % of failures (within the error budget) slow
		"every answer, refusals and failures too, 150.0": func(r *writeReport) { r.AnswerLatency.P99 = 150 },
		"visible p95 1000": func(r *writeReport) { r.Visibility.P95 = 1000 },
		"not visible":      func(r *writeReport) { r.NotVisible = 1 },
		"200 errors":       func(r *writeReport) { r.ErrorsTotal = 200 },
		"dropped":          func(r *writeReport) { r.Dropped = 1 },
		"not measured":     func(r *writeReport) { r.Windows = nil },
		"no full 10s":      func(r *writeReport) { r.Windows.Windows = nil },
		"0 issued":         func(r *writeReport) { r.Issued, r.ErrorsTotal = 0, 0 },
	}
	for want, breakIt := range cases {
		r := good()
		breakIt(&r)
		h := judge(r)
		if h.Holds || len(h.Failed) != 1 || !strings.Contains(h.Failed[0], want) {
			t.Errorf("%s: judge = %+v, want one failure naming it", want, h)
		}
	}
}
