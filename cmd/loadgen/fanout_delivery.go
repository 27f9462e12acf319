package main

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// deliveryReport is what the streams received of the versions published during the drive.
type deliveryReport struct {
	WindowS           float64           `json:"window_s"` // drive start until the final check
	BaseVersion       int64             `json:"base_version"`
	FinalVersion      int64             `json:"final_version"`
	VersionsPublished int               `json:"versions_published"`
	VersionsClose     int               `json:"versions_rendered_within_250ms_of_previous"`
	ExtraVersions     int               `json:"versions_not_polled"` // among the published: seen only on streams
	PairsExpected     int64             `json:"pairs_expected"`      // connected streams x versions published
	PairsDelivered    int64             `json:"pairs_delivered"`
	DeliveredShare    float64           `json:"delivered_share"`
	MissedSuperseded  int64             `json:"missed_superseded"` // a newer version reached the stream later
	MissedAfterDrop   int64             `json:"missed_after_drop"`
	MissedBehind      int64             `json:"missed_behind"` // neither it nor a newer one arrived
	Lag               summary           `json:"lag"`           // receive - data.ts
	EndToEnd          summary           `json:"end_to_end"`    // the leader score's 202 -> receive
	OnLatest          int64             `json:"on_latest"`     // at the end of the settle
	OnLatestShare     float64           `json:"on_latest_share"`
	ConvergedAfterS   float64           `json:"all_on_latest_after_s"` // more time after the settle until every open stream held it; -1: not within -converge-timeout
	AcceptToRender    summary           `json:"accept_to_render"`      // per version: the leader's 202 -> data.ts, the write and notification pipeline
	PollerPolls       int64             `json:"poller_polls"`
	PollerErrors      int64             `json:"poller_errors"`
	PollerLastError   string            `json:"poller_last_error,omitempty"`
	PerVersion        []versionDelivery `json:"per_version"`
}

// versionDelivery is one published version.
type versionDelivery struct {
	Version   int64   `json:"version"`
	AcceptedS float64 `json:"leader_accepted_at_s,omitempty"` // the leader's 202, since the drive started
	SeenAtS   float64 `json:"polled_at_s"`                    // first answer of GET /v1/leaderboard/top showing it, since the drive started; -1: never polled
	RenderedS float64 `json:"rendered_at_s,omitempty"`        // data.ts, since the drive started
	GapMs     float64 `json:"render_gap_ms"`                  // data.ts minus the previous version's
	Delivered int64   `json:"delivered"`                      // streams that received it
	LagP99    float64 `json:"lag_p99_ms"`                     // over those streams
	LagMax    float64 `json:"lag_max_ms"`
	Leader    string  `json:"leader,omitempty"`
}

func (f *fanout) delivery(r *deliveryReport) {
	m := &f.marks
	r.WindowS = seconds(m.end.Sub(m.driveStart))
	r.BaseVersion, r.FinalVersion = m.baseVersion, m.finalVersion
	f.watch.mu.Lock()
	r.PollerPolls, r.PollerErrors, r.PollerLastError = f.watch.polls, f.watch.errs, f.watch.lastErr
	f.watch.mu.Unlock()
	published := f.published()
	r.VersionsPublished = len(published)
	index := make(map[int64]int, len(published))
	for i, v := range published {
		index[v.Version] = i
		if v.SeenAt.IsZero() {
			r.ExtraVersions++
		}
	}
	per := make([]latencies, len(published))
	firstTS := make([]int64, len(published))
	var lags, e2e []time.Duration
	got := make([]bool, len(published))
	for _, s := range f.streams {
		if s == nil || s.outcome != connected {
			continue
		}
		r.PairsExpected += int64(len(published))
		clear(got)
		newest := -1
		for _, ev := range s.events {
			if ev.version <= m.baseVersion {
				continue
			}
			j, ok := index[ev.version]
			if !ok {
				continue // published after the final version was read
			}
			if got[j] {
				continue
			}
			got[j], newest = true, max(newest, j)
			r.PairsDelivered++
			lag := time.Duration(ev.at - ev.ts)
			lags = append(lags, lag)
			per[j].add(lag)
			if firstTS[j] == 0 || ev.ts < firstTS[j] {
				firstTS[j] = ev.ts
			}
			if at, ok := f.accepted[published[j].Leader]; ok {
				e2e = append(e2e, time.Unix(0, ev.at).Sub(at))
			}
		}
		for j := range published {
			switch {
			case got[j]:
			case j < newest:
				r.MissedSuperseded++
			case s.ended:
				r.MissedAfterDrop++
			default:
				r.MissedBehind++
			}
		}
	}
	r.OnLatest = m.onLatest
	r.ConvergedAfterS = -1
	if m.convergedAfter >= 0 {
		r.ConvergedAfterS = seconds(m.convergedAfter)
	}
	if r.PairsExpected > 0 {
		r.DeliveredShare = math.Round(float64(r.PairsDelivered)/float64(r.PairsExpected)*1e6) / 1e6
	}
	if n := f.connected.Load(); n > 0 {
		r.OnLatestShare = math.Round(float64(r.OnLatest)/float64(n)*1e6) / 1e6
	}
	r.Lag = summarize(lags)
	r.EndToEnd = summarize(e2e)
	var toRender latencies
	leaders := map[string]bool{}
	for j, v := range published {
		vs := per[j].summary()
		vd := versionDelivery{Version: v.Version, SeenAtS: -1, Delivered: int64(vs.Count), LagP99: vs.P99, LagMax: vs.Max, Leader: v.Leader}
		if !v.SeenAt.IsZero() {
			vd.SeenAtS = seconds(v.SeenAt.Sub(m.driveStart))
		}
		at, ok := f.accepted[v.Leader]
		if ok {
			vd.AcceptedS = seconds(at.Sub(m.driveStart))
		}
		if firstTS[j] != 0 {
			rendered := time.Unix(0, firstTS[j])
			vd.RenderedS = seconds(rendered.Sub(m.driveStart))
			if ok && !leaders[v.Leader] { // later versions with the same leader come from other changes
				toRender.add(rendered.Sub(at))
			}
		}
		leaders[v.Leader] = true
		if j > 0 && firstTS[j] != 0 && firstTS[j-1] != 0 {
			gap := time.Duration(firstTS[j] - firstTS[j-1])
			vd.GapMs = ms(gap)
			if gap < hubWindow {
				r.VersionsClose++
			}
		}
		r.PerVersion = append(r.PerVersion, vd)
	}
	r.AcceptToRender = toRender.summary()
}

// published are the versions of the window: those the poller saw after the base version
// until the end of the settle, plus those only streams saw (two changes within one poll
// interval), up to the final version; the latter have no SeenAt.
func (f *fanout) published() []seenVersion {
	m := &f.marks
	var out []seenVersion
	seen := map[int64]bool{}
	for _, v := range f.watch.since(m.baseVersion) {
		if !v.SeenAt.After(m.end) {
			out = append(out, v)
			seen[v.Version] = true
		}
	}
	for _, s := range f.streams {
		if s == nil {
			continue
		}
		for _, ev := range s.events {
			if ev.version > m.baseVersion && ev.version <= m.finalVersion && !seen[ev.version] {
				out = append(out, seenVersion{Version: ev.version})
				seen[ev.version] = true
			}
		}
	}
	slices.SortFunc(out, func(a, b seenVersion) int { return cmp.Compare(a.Version, b.Version) })
	return out
}
