package main

import (
	"fmt"
	"math"
	"runtime"
	"time"
)

// hubWindow is the service's coalescing window: two versions rendered closer than this may
// reach a client as one event (the newer).
const hubWindow = 250 * time.Millisecond

// fanoutReport is the result of one `loadgen fanout` run, as printed and as JSON.
type fanoutReport struct {
	Machine    string       `json:"machine"`
	FinishedAt time.Time    `json:"finished_at"`
	Config     fanoutConfig `json:"config"`
	FileLimit  uint64       `json:"loadgen_open_file_limit"`

	Streams  streamReport    `json:"streams"`
	Delivery deliveryReport  `json:"delivery"`
	Drive    *driveReport    `json:"drive,omitempty"`
	Servers  []serverReport  `json:"servers"`
	Metrics  []targetMetrics `json:"hub_metrics"`
	CPU      cpuReport       `json:"cpu"`
}

// streamReport counts how the streams' connections went.
type streamReport struct {
	Clients        int64        `json:"clients"`
	Connected      int64        `json:"connected"`
	Refused        int64        `json:"refused"` // 503 too_many_streams
	Failed         int64        `json:"failed"`  // other answers, transport errors
	ConnectErrors  []errorCount `json:"connect_errors"`
	RampS          float64      `json:"ramp_s"`
	ConnectLatency summary      `json:"connect_latency"` // dial -> 200 headers
	FirstSnapshot  summary      `json:"first_snapshot"`  // dial -> the snapshot event read
	DroppedEarly   int64        `json:"dropped_early"`   // ended before the loadgen closed them
	DroppedInRamp  int64        `json:"dropped_before_drive"`
	DropErrors     []errorCount `json:"drop_errors"`
	DropAge        summary      `json:"drop_stream_age"` // connected -> ended, for the dropped
	Comments       int64        `json:"comment_lines"`
	OtherEvents    int64        `json:"other_events"`
	Malformed      int64        `json:"malformed_events"`
	Backwards      int64        `json:"version_went_backwards"`
}

// driveReport counts the writes of the drive.
type driveReport struct {
	LeadersPosted   int64        `json:"leaders_posted"`
	LeadersAccepted int64        `json:"leaders_accepted"`
	LeaderErrors    []errorCount `json:"leader_errors"`
	BgIssued        int64        `json:"background_issued"`
	BgAccepted      int64        `json:"background_accepted"`
	BgUnchanged     int64        `json:"background_unchanged"`
	BgDropped       int64        `json:"background_dropped_inflight_bound"`
	BgErrors        []errorCount `json:"background_errors"`
}

// serverReport is one API process's CPU and memory, from /proc.
type serverReport struct {
	PID            int     `json:"pid"`
	CPURampS       float64 `json:"cpu_ramp_s"`
	CPUDriveS      float64 `json:"cpu_drive_s"` // drive + settle
	RampCores      float64 `json:"ramp_cores"`
	DriveCores     float64 `json:"drive_cores"`
	RSSIdleMB      float64 `json:"rss_before_mb"`
	RSSConnectedMB float64 `json:"rss_connected_mb"` // after the ramp
	RSSPeakMB      float64 `json:"rss_peak_mb"`      // sampled every 250 ms over ramp and drive
	RSSEndMB       float64 `json:"rss_end_mb"`
	HWMMB          float64 `json:"vm_hwm_mb"` // the process's lifetime peak
	Threads        int64   `json:"threads"`
	Error          string  `json:"error,omitempty"`
}

// targetMetrics is a target's hub series before, after the ramp, and at the end.
type targetMetrics struct {
	Target    string     `json:"target"`
	Before    sseMetrics `json:"before"`
	AfterRamp sseMetrics `json:"after_ramp"`
	End       sseMetrics `json:"end"`
}

// cpuReport is this loadgen's CPU and the whole machine's, in cores busy on average.
type cpuReport struct {
	LoadgenRampCores  float64 `json:"loadgen_ramp_cores"`
	LoadgenDriveCores float64 `json:"loadgen_drive_cores"`
	MachineRampCores  float64 `json:"machine_ramp_cores"`
	MachineDriveCores float64 `json:"machine_drive_cores"`
	MachineCores      int     `json:"machine_cores"`
	// The machine's TCP counters that moved (all processes, loopback included).
	TCPRamp  map[string]int64 `json:"tcp_counters_ramp,omitempty"`
	TCPDrive map[string]int64 `json:"tcp_counters_drive,omitempty"`
}

func (f *fanout) report() *fanoutReport {
	m := &f.marks
	r := &fanoutReport{Machine: machine(), FinishedAt: time.Now().UTC(), Config: f.cfg, FileLimit: m.fileLimit}
	f.streamCounts(&r.Streams)
	f.delivery(&r.Delivery)
	if d := f.driver; d != nil {
		r.Drive = &driveReport{
			LeadersPosted: d.leadersPosted.Load(), LeadersAccepted: d.leadersAccepted.Load(), LeaderErrors: d.leaderErrs.rows(),
			BgIssued: d.bgIssued.Load(), BgAccepted: d.bgAccepted.Load(), BgUnchanged: d.bgUnchanged.Load(),
			BgDropped: d.bgDropped.Load(), BgErrors: d.bgErrs.rows(),
		}
	}
	rampWall, driveWall := m.rampEnd.Sub(m.rampStart), m.end.Sub(m.driveStart)
	for _, pid := range f.cfg.PIDs {
		s := serverReport{PID: pid}
		idle, ok0 := m.procIdle[pid]
		ramp, ok1 := m.procRamp[pid]
		end, ok2 := m.procEnd[pid]
		if !ok0 || !ok1 || !ok2 {
			s.Error = "could not read /proc/" + fmt.Sprint(pid) + " at every mark (process gone?)"
		} else {
			s.CPURampS, s.CPUDriveS = round2(ramp.cpu.Seconds()-idle.cpu.Seconds()), round2(end.cpu.Seconds()-ramp.cpu.Seconds())
			s.RampCores, s.DriveCores = cores(ramp.cpu-idle.cpu, rampWall), cores(end.cpu-ramp.cpu, driveWall)
			s.RSSIdleMB, s.RSSConnectedMB, s.RSSEndMB = mb(idle.rss), mb(ramp.rss), mb(end.rss)
			s.RSSPeakMB = mb(max(m.peakRamp[pid], m.peakDrive[pid]))
			s.HWMMB, s.Threads = mb(end.hwm), end.threads
		}
		r.Servers = append(r.Servers, s)
	}
	for i, t := range f.cfg.Targets {
		tm := targetMetrics{Target: t}
		if i < len(m.metrics0) && i < len(m.metrics1) && i < len(m.metrics2) {
			tm.Before, tm.AfterRamp, tm.End = m.metrics0[i], m.metrics1[i], m.metrics2[i]
		}
		r.Metrics = append(r.Metrics, tm)
	}
	r.CPU = cpuReport{
		LoadgenRampCores: cores(m.cpuRamp, rampWall), LoadgenDriveCores: cores(m.cpuDrive, driveWall),
		MachineRampCores: busyCores(m.machine0, m.machine1, rampWall), MachineDriveCores: busyCores(m.machine1, m.machine2, driveWall),
		MachineCores: runtime.NumCPU(), TCPRamp: tcpDelta(m.tcp0, m.tcp1), TCPDrive: tcpDelta(m.tcp1, m.tcp2),
	}
	return r
}

func (f *fanout) streamCounts(r *streamReport) {
	var connectErrs, dropErrs counter
	var connLat, firstLat, dropAge latencies
	r.Clients = int64(f.cfg.Clients)
	r.RampS = seconds(f.marks.rampEnd.Sub(f.marks.rampStart))
	for _, s := range f.streams {
		if s == nil {
			continue
		}
		switch s.outcome {
		case connected:
			r.Connected++
			connLat.add(s.connectedAt.Sub(s.dialAt))
			if !s.firstAt.IsZero() {
				firstLat.add(s.firstAt.Sub(s.dialAt))
			}
		case refused:
			r.Refused++
			connectErrs.add(s.failKey, s.failSample)
		case failed:
			r.Failed++
			connectErrs.add(s.failKey, s.failSample)
		}
		if s.ended {
			r.DroppedEarly++
			if s.endedAt.Before(f.marks.driveStart) {
				r.DroppedInRamp++
			}
			dropErrs.add(s.endErr, s.endSample)
			dropAge.add(s.endedAt.Sub(s.connectedAt))
		}
		r.Comments += s.comments
		r.OtherEvents += s.other
		r.Malformed += s.malformed
		r.Backwards += s.backwards
	}
	r.ConnectErrors, r.DropErrors = connectErrs.rows(), dropErrs.rows()
	r.ConnectLatency, r.FirstSnapshot, r.DropAge = connLat.summary(), firstLat.summary(), dropAge.summary()
}

func cores(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return round2(cpu.Seconds() / wall.Seconds())
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

func mb(b int64) float64 { return math.Round(float64(b)/(1<<20)*10) / 10 }
