package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// Whether a rate "holds" (issue 12's criteria for a sustained rate): the pipeline applies
// within 10 % of what the API accepted in every window, accept p99 under 100 ms, accept →
// visible p95 under 1 s, under 1 % errors, nothing dropped and everything visible.
const (
	holdsAppliedRatio = 0.9
	holdsAcceptP99Ms  = 100
	holdsVisibleP95Ms = 1000
	holdsErrorShare   = 0.01
)

// windows counts a write phase's accepted commands per window of its duration, by the
// time their 202 arrived; applied counts come from score_history once the phase drained.
type windows struct {
	size     time.Duration
	start    time.Time
	accepted []atomic.Int64 // the phase's full windows, then one for every later answer
	latency  []latencies    // the same windows' accept latencies
	applied  []int64        // the same windows, from score_history once measured
	measured bool
}

// newWindows covers a phase of d from start: floor(d/size) full windows (a shorter rest
// is counted with what comes after the phase). size is positive (-window is at least 1s).
func newWindows(start time.Time, d, size time.Duration) *windows {
	n := int(d / size)
	return &windows{size: size, start: start, accepted: make([]atomic.Int64, n+1), latency: make([]latencies, n+1), applied: make([]int64, n+1)}
}

// index is the window at (never before start: sends begin at it): a full window, or the
// last slot for anything after them.
func (w *windows) index(at time.Time) int {
	return min(int(at.Sub(w.start)/w.size), len(w.accepted)-1)
}

// accept counts a 202 answered at at, latency after its scheduled send.
func (w *windows) accept(at time.Time, latency time.Duration) {
	i := w.index(at)
	w.accepted[i].Add(1)
	w.latency[i].add(latency)
}

// measureApplied counts, per window, the commands the pipeline applied (score_history rows
// by applied_at, the transaction's start, less the daily and season rows of match points).
// Call it once the phase drained and before the next one starts.
func (b *bench) measureApplied(ctx context.Context, ph *writePhase) {
	w := ph.win
	if b.pg == nil || w == nil || ctx.Err() != nil {
		return
	}
	rows, err := b.pg.Query(ctx, `
		SELECT floor(extract(epoch FROM applied_at - $1::timestamptz) / $2)::bigint AS w,
		       count(*) FILTER (WHERE board_id NOT IN ($3, $4))
		FROM score_history WHERE applied_at >= $1 GROUP BY 1`,
		w.start, w.size.Seconds(), dailyBoard, seasonBoard)
	if err != nil {
		fmt.Fprintf(b.out, "  windows: %v\n", err)
		return
	}
	defer rows.Close()
	last := len(w.applied) - 1
	for rows.Next() {
		var i, n int64
		if err := rows.Scan(&i, &n); err != nil {
			fmt.Fprintf(b.out, "  windows: %v\n", err)
			return
		}
		w.applied[min(int(i), last)] += n
	}
	if err := rows.Err(); err != nil {
		fmt.Fprintf(b.out, "  windows: %v\n", err)
		return
	}
	w.measured = true
}

// windowReport is one window of a write phase.
type windowReport struct {
	StartS      float64 `json:"start_s"`
	Accepted    int64   `json:"accepted"`      // 202s answered within it
	Applied     int64   `json:"applied"`       // commands the pipeline applied within it
	AcceptP99Ms float64 `json:"accept_p99_ms"` // of the 202s answered within it
}

// windowsReport is a write phase window by window.
type windowsReport struct {
	SizeS   float64        `json:"size_s"`
	Windows []windowReport `json:"windows"`
	// After the full windows: late answers and the drain.
	AfterAccepted int64 `json:"after_accepted"`
	AfterApplied  int64 `json:"after_applied"`
	// WorstRatio is the lowest applied / accepted of a full window (1 when none accepted
	// anything), at WorstStartS.
	WorstRatio  float64 `json:"worst_applied_ratio"`
	WorstStartS float64 `json:"worst_start_s"`
}

func (w *windows) report() *windowsReport {
	if w == nil || !w.measured {
		return nil
	}
	r := &windowsReport{SizeS: w.size.Seconds(), WorstRatio: 1}
	last := len(w.accepted) - 1
	for i := range last {
		wr := windowReport{StartS: (time.Duration(i) * w.size).Seconds(), Accepted: w.accepted[i].Load(), Applied: w.applied[i], AcceptP99Ms: w.latency[i].summary().P99}
		r.Windows = append(r.Windows, wr)
		if wr.Accepted > 0 {
			if ratio := float64(wr.Applied) / float64(wr.Accepted); ratio < r.WorstRatio {
				r.WorstRatio, r.WorstStartS = ratio, wr.StartS
			}
		}
	}
	r.AfterAccepted, r.AfterApplied = w.accepted[last].Load(), w.applied[last]
	return r
}

// holdsReport says whether an open-loop phase's rate holds, and why not.
type holdsReport struct {
	Holds  bool     `json:"holds"`
	Failed []string `json:"failed,omitempty"`
}

// judge applies the criteria to a write phase's report.
func judge(r writeReport) *holdsReport {
	h := &holdsReport{}
	fail := func(format string, a ...any) { h.Failed = append(h.Failed, fmt.Sprintf(format, a...)) }
	switch w := r.Windows; {
	case w == nil:
		fail("applied per window not measured")
	case len(w.Windows) == 0:
		fail("no full %.0fs window", w.SizeS)
	case w.WorstRatio < holdsAppliedRatio:
		fail("the window at %.0fs applied %.1f %% of what it accepted (want >= %.0f %%)", w.WorstStartS, 100*w.WorstRatio, 100*holdsAppliedRatio)
	}
	if r.AcceptLatency.P99 >= holdsAcceptP99Ms {
		fail("accept p99 %.1f ms (want < %d ms)", r.AcceptLatency.P99, holdsAcceptP99Ms)
	} else if r.AnswerLatency.P99 >= holdsAcceptP99Ms {
		fail("p99 of every answer, refusals and failures too, %.1f ms (want < %d ms)", r.AnswerLatency.P99, holdsAcceptP99Ms)
	}
	if r.Visibility.P95 >= holdsVisibleP95Ms {
		fail("accept -> visible p95 %.0f ms (want < %d ms)", r.Visibility.P95, holdsVisibleP95Ms)
	}
	if r.NotVisible > 0 {
		fail("%d accepted values not visible", r.NotVisible)
	}
	if r.Issued == 0 || float64(r.ErrorsTotal) >= holdsErrorShare*float64(r.Issued) {
		fail("%d errors of %d issued (want < %.0f %%)", r.ErrorsTotal, r.Issued, 100*holdsErrorShare)
	}
	if r.Dropped > 0 {
		fail("%d sends dropped at the in-flight bound", r.Dropped)
	}
	if r.Unchanged > 0 { // every best score sent improves on the user's (users.next): dropped
		fail("%d improving best scores answered unchanged", r.Unchanged)
	}
	h.Holds = len(h.Failed) == 0
	return h
}

// printPerWindow prints one value per window, ten to a line, the first line headed.
func (b *bench) printPerWindow(head string, values []string) {
	const perLine = 10
	for i := 0; i < len(values); i += perLine {
		h := strings.Repeat(" ", len(head))
		if i == 0 {
			h = head
		}
		fmt.Fprintf(b.out, "  %s %s\n", h, strings.Join(values[i:min(i+perLine, len(values))], " "))
	}
}

// printWindows prints the phase's windows and, for an open-loop phase, whether its rate holds.
func (b *bench) printWindows(ph *writePhase) {
	r := b.writeReport(ph)
	w := r.Windows
	if w == nil {
		return
	}
	var parts, p99s []string
	for _, x := range w.Windows {
		parts = append(parts, fmt.Sprintf("%d/%d", x.Applied, x.Accepted))
		p99s = append(p99s, fmt.Sprintf("%.0f", x.AcceptP99Ms))
	}
	b.printPerWindow(fmt.Sprintf("%2.0fs windows (applied/accepted):", w.SizeS), parts)
	b.printPerWindow("accept p99 ms per window:", p99s)
	fmt.Fprintf(b.out, "  worst window applied %.1f %% of its accepted (at %.0fs); after the windows: %d accepted, %d applied\n",
		100*w.WorstRatio, w.WorstStartS, w.AfterAccepted, w.AfterApplied)
	if h := r.Holds; h != nil {
		if h.Holds {
			fmt.Fprintf(b.out, "  %.0f/s holds: every window applied >= %.0f %% of its accepted, accept p99 < %d ms, visible p95 < %d ms, errors < %.0f %%, nothing dropped\n",
				r.OfferedRate, 100*holdsAppliedRatio, holdsAcceptP99Ms, holdsVisibleP95Ms, 100*holdsErrorShare)
		} else {
			fmt.Fprintf(b.out, "  %.0f/s does not hold: %s\n", r.OfferedRate, strings.Join(h.Failed, "; "))
		}
	}
}
