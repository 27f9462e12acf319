package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

func (r *fanoutReport) print(w io.Writer) {
	name := ""
	if r.Config.Name != "" {
		name = " [" + r.Config.Name + "]"
	}
	st, d := r.Streams, r.Delivery
	fmt.Fprintf(w, "\n==================== fan-out%s: %d SSE clients over %v ====================\n", name, st.Clients, r.Config.Targets)
	fmt.Fprintf(w, "streams: connected %d, refused %d, failed %d; ramp %.1fs; connect %s\n", st.Connected, st.Refused, st.Failed, st.RampS, fmtSummary(st.ConnectLatency))
	fmt.Fprintf(w, "  first snapshot after dial: %s\n", fmtSummary(st.FirstSnapshot))
	for _, e := range st.ConnectErrors {
		fmt.Fprintf(w, "  connect error %-34s %8d  e.g. %s\n", e.Key, e.Count, truncate(e.Sample, 140))
	}
	fmt.Fprintf(w, "  dropped early (ended by the service): %d, %d of them before the drive; stream age at drop: %s\n", st.DroppedEarly, st.DroppedInRamp, fmtSummary(st.DropAge))
	for _, e := range st.DropErrors {
		fmt.Fprintf(w, "    drop %-40s %8d  %s\n", e.Key, e.Count, truncate(e.Sample, 120))
	}
	if st.Malformed+st.Backwards > 0 {
		fmt.Fprintf(w, "  PROTOCOL: %d malformed leaderboard.updated, %d versions lower than one already received\n", st.Malformed, st.Backwards)
	}
	if dr := r.Drive; dr != nil {
		fmt.Fprintf(w, "drive: leaders posted %d, accepted %d; background writes issued %d, accepted %d, unchanged %d, dropped %d\n",
			dr.LeadersPosted, dr.LeadersAccepted, dr.BgIssued, dr.BgAccepted, dr.BgUnchanged, dr.BgDropped)
		for _, e := range append(slices.Clone(dr.LeaderErrors), dr.BgErrors...) {
			fmt.Fprintf(w, "  write error %-34s %8d  e.g. %s\n", e.Key, e.Count, truncate(e.Sample, 140))
		}
	}
	fmt.Fprintf(w, "versions: %d published in %.1fs (%d -> %d), %d rendered <250ms after the previous (may coalesce), %d seen only on streams (not by the poller)\n",
		d.VersionsPublished, d.WindowS, d.BaseVersion, d.FinalVersion, d.VersionsClose, d.ExtraVersions)
	fmt.Fprintf(w, "delivered: %d of %d (stream, version) pairs = %.4f%%; missed: %d superseded by a newer one, %d after a drop, %d behind\n",
		d.PairsDelivered, d.PairsExpected, d.DeliveredShare*100, d.MissedSuperseded, d.MissedAfterDrop, d.MissedBehind)
	fmt.Fprintf(w, "lag (receive - data.ts):      %s\n", fmtSummary(d.Lag))
	if d.EndToEnd.Count > 0 {
		fmt.Fprintf(w, "leader's 202 -> receive:      %s\n", fmtSummary(d.EndToEnd))
		fmt.Fprintf(w, "  of which 202 -> rendered by the hub (per version: outbox, relay, broker, projector, notification): %s\n", fmtSummary(d.AcceptToRender))
	}
	converged := "not within -converge-timeout"
	if d.ConvergedAfterS >= 0 {
		converged = fmt.Sprintf("%.1fs after the settle", d.ConvergedAfterS)
	}
	fmt.Fprintf(w, "on the latest version (%d) after %s settle: %d of %d connected (%.2f%%); every open stream on it %s\n",
		d.FinalVersion, r.Config.SettleS, d.OnLatest, st.Connected, d.OnLatestShare*100, converged)
	if d.PollerErrors > 0 {
		fmt.Fprintf(w, "  version poller: %d of %d polls failed, last: %s\n", d.PollerErrors, d.PollerPolls, d.PollerLastError)
	}
	for _, s := range r.Servers {
		if s.Error != "" {
			fmt.Fprintf(w, "server pid %d: %s\n", s.PID, s.Error)
			continue
		}
		fmt.Fprintf(w, "server pid %d: CPU %.1fs in ramp (%.2f cores), %.1fs in drive+settle (%.2f cores); RSS %.0f MB before, %.0f MB connected, peak %.0f MB, end %.0f MB; %d threads\n",
			s.PID, s.CPURampS, s.RampCores, s.CPUDriveS, s.DriveCores, s.RSSIdleMB, s.RSSConnectedMB, s.RSSPeakMB, s.RSSEndMB, s.Threads)
	}
	for _, t := range r.Metrics {
		fmt.Fprintf(w, "hub %s: streams %.0f -> %.0f -> %.0f; dropped by the hub +%.0f; leaderboard events written +%.0f\n",
			t.Target, t.Before.Streams, t.AfterRamp.Streams, t.End.Streams, t.End.Dropped-t.Before.Dropped, t.End.TopEvents-t.Before.TopEvents)
	}
	fmt.Fprintf(w, "loadgen: %.2f cores in ramp, %.2f in drive; whole machine busy %.2f cores in ramp, %.2f in drive (of %d)\n",
		r.CPU.LoadgenRampCores, r.CPU.LoadgenDriveCores, r.CPU.MachineRampCores, r.CPU.MachineDriveCores, r.CPU.MachineCores)
	for _, c := range []struct {
		name string
		m    map[string]int64
	}{{"ramp", r.CPU.TCPRamp}, {"drive", r.CPU.TCPDrive}} {
		if len(c.m) > 0 {
			fmt.Fprintf(w, "machine TCP counters in %s: %s\n", c.name, fmtCounters(c.m))
		}
	}
	fmt.Fprintf(w, "machine: %s\n", r.Machine)
}

func fmtCounters(m map[string]int64) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s +%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func (r *fanoutReport) writeJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
