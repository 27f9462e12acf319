package main

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

type wantEvent struct{ id, name, data string }

func readAll(t *testing.T, r io.Reader) ([]wantEvent, *sseReader) {
	t.Helper()
	sr := newSSEReader(r, 16, 1<<10)
	var got []wantEvent
	for {
		ev, err := sr.next()
		if err == io.EOF {
			return got, sr
		}
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		w := wantEvent{name: string(ev.name), data: string(ev.data)}
		if ev.id != nil {
			w.id = "#" + string(ev.id)
		}
		got = append(got, w)
	}
}

func TestSSEReader(t *testing.T) {
	stream := "retry: 2000\n: connected\n\n" +
		"id: 7\nevent: leaderboard.updated\ndata: {\"version\":7}\n\n" +
		": heartbeat\n\n" +
		"event: user.rank.updated\ndata: a\ndata:b\ndata\n\n" + // data lines join with LF; "data" alone is empty
		"id: 8\r\nevent: leaderboard.updated\r\ndata: " + strings.Repeat("x", 40) + "\r\n\r\n" + // CRLF, a line longer than the buffer
		"id: 9\revent: e\rdata: cr\r\r" + // lone CRs
		"event: no-data\n\n" + // not dispatched
		"id\ndata: empty id\n\n" +
		"data: cut off"
	want := []wantEvent{
		{"#7", "leaderboard.updated", `{"version":7}`},
		{"", "user.rank.updated", "a\nb\n"},
		{"#8", "leaderboard.updated", strings.Repeat("x", 40)},
		{"#9", "e", "cr"},
		{"#", "message", "empty id"},
	}
	for name, r := range map[string]io.Reader{
		"whole":       strings.NewReader(stream),
		"byte a read": iotest.OneByteReader(strings.NewReader(stream)),
	} {
		t.Run(name, func(t *testing.T) {
			got, sr := readAll(t, r)
			if len(got) != len(want) {
				t.Fatalf("got %d events %q, want %d", len(got), got, len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("event %d = %q, want %q", i, got[i], want[i])
				}
			}
			if sr.comments != 2 || sr.retry != 2000 {
				t.Errorf("comments %d retry %d, want 2 and 2000", sr.comments, sr.retry)
			}
		})
	}
}

func TestParseTopEvent(t *testing.T) {
	ts := "2026-11-21T21:01:48.251224743Z"
	want, _ := time.Parse(time.RFC3339Nano, ts)
	data := `{"board":"global","entries":[{"rank":1,"user_id":"u","score":5,"nick_name":"say \"ts\":\"x\"","updated_at":"2026-01-01T00:00:00Z"}],"period":"all_time","ts":"` + ts + `","version":42}`
	tests := []struct {
		name string
		ev   sseEvent
		ok   bool
		ver  int64
	}{
		{"id and sorted keys", sseEvent{id: []byte("42"), data: []byte(data)}, true, 42},
		{"no id: version from data", sseEvent{data: []byte(data)}, true, 42},
		{"other key order", sseEvent{id: []byte("3"), data: []byte(`{"ts":"` + ts + `","version":3,"entries":[]}`)}, true, 3},
		{"no ts", sseEvent{id: []byte("3"), data: []byte(`{"version":3}`)}, false, 0},
		{"not json", sseEvent{data: []byte(`nope`)}, false, 0},
	}
	for _, tt := range tests {
		got, ok := parseTopEvent(tt.ev)
		if ok != tt.ok || (ok && (got.version != tt.ver || !got.ts.Equal(want))) {
			t.Errorf("%s: got %d %v %v, want %d %v %v", tt.name, got.version, got.ts, ok, tt.ver, want, tt.ok)
		}
	}
}

func TestParseProc(t *testing.T) {
	stat := "4242 (leader board) S 1 4242 4242 0 -1 4194560 5000 0 0 0 1234 567 0 0 20 0 12 0 100 2000000000 30000 18446744073709551615\n"
	cpu, err := parseProcStatCPU([]byte(stat))
	if err != nil || cpu != 18010*time.Millisecond {
		t.Fatalf("cpu = %v, %v; want 18.01s", cpu, err)
	}
	if _, err := parseProcStatCPU([]byte("4242 (x) S 1")); err == nil {
		t.Fatal("short stat parsed")
	}
	m := parseMachineCPU([]byte("cpu  100 5 50 1000 20 1 4 0 7 0\ncpu0 1 2 3\n"))
	if !m.ok || m.busy != 1600*time.Millisecond || m.total != 11800*time.Millisecond {
		t.Fatalf("machine cpu = %+v", m)
	}
	status := "Name:\tleaderboard\nVmHWM:\t  524288 kB\nVmRSS:\t  262144 kB\nThreads:\t12\n"
	rss, hwm, threads := parseProcStatus([]byte(status))
	if rss != 256<<20 || hwm != 512<<20 || threads != 12 {
		t.Fatalf("rss %d hwm %d threads %d", rss, hwm, threads)
	}
}

func TestParseFanoutConfig(t *testing.T) {
	env := func(k string) string {
		if k == "LEADERBOARD_JWT_SECRET" {
			return "0123456789abcdef0123"
		}
		return ""
	}
	c, err := parseFanoutConfig([]string{"-clients", "30", "-targets", "http://a:1/, http://b:2", "-pids", "10,11"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Targets) != 2 || c.Targets[0] != "http://a:1" || len(c.PIDs) != 2 || c.Clients != 30 {
		t.Fatalf("config = %+v", c)
	}
	for _, bad := range [][]string{{"-clients", "0"}, {"-targets", "https://x"}, {"-pids", "x"}, {"-peers", "2"}, {"extra"}} {
		if _, err := parseFanoutConfig(bad, env, io.Discard); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestDeliveryAccounting(t *testing.T) {
	t0 := time.Now()
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	ev := func(v int64, ts, at time.Duration) recvEvent { return recvEvent{version: v, ts: ns(ts), at: ns(at)} }
	w := &versionWatch{seen: []seenVersion{
		{Version: 5, SeenAt: t0.Add(-time.Second)}, // before the drive: the base
		{Version: 10, SeenAt: t0.Add(100 * time.Millisecond)},
		{Version: 20, SeenAt: t0.Add(400 * time.Millisecond)},
		{Version: 30, SeenAt: t0.Add(700 * time.Millisecond)},
		{Version: 40, SeenAt: t0.Add(9 * time.Second)}, // after the end: not counted
	}}
	f := &fanout{watch: w, marks: fanoutMarks{driveStart: t0, end: t0.Add(time.Second), baseVersion: 5, finalVersion: 30}}
	f.connected.Store(3)
	f.streams = []*stream{
		{outcome: connected, events: []recvEvent{ev(5, -time.Second, -time.Second), ev(10, 90*time.Millisecond, 100*time.Millisecond),
			ev(20, 390*time.Millisecond, 400*time.Millisecond), ev(30, 690*time.Millisecond, 700*time.Millisecond)}},
		{outcome: connected, events: []recvEvent{ev(10, 90*time.Millisecond, 120*time.Millisecond), ev(30, 690*time.Millisecond, 720*time.Millisecond), ev(25, 0, 0)}},
		{outcome: connected, ended: true, events: []recvEvent{ev(10, 90*time.Millisecond, 110*time.Millisecond)}},
		{outcome: refused},
	}
	for i, last := range []int64{30, 30, 10, -1} {
		f.streams[i].last.Store(last)
	}
	f.marks.onLatest = f.onLatest()
	var r deliveryReport
	f.delivery(&r)
	// Version 25 was only seen on a stream: it counts as published.
	if r.VersionsPublished != 4 || r.ExtraVersions != 1 || r.PairsExpected != 12 || r.PairsDelivered != 7 {
		t.Fatalf("published %d (%d not polled), pairs %d/%d; want 4 (1), 7/12", r.VersionsPublished, r.ExtraVersions, r.PairsDelivered, r.PairsExpected)
	}
	if r.MissedSuperseded != 2 || r.MissedAfterDrop != 3 || r.MissedBehind != 0 {
		t.Fatalf("missed %d/%d/%d; want 2/3/0", r.MissedSuperseded, r.MissedAfterDrop, r.MissedBehind)
	}
	if r.OnLatest != 2 || r.DeliveredShare != 0.583333 {
		t.Fatalf("on latest %d share %v", r.OnLatest, r.DeliveredShare)
	}
	if r.Lag.Count != 7 || r.Lag.Max != 30 || r.Lag.P50 != 10 {
		t.Fatalf("lag %+v", r.Lag)
	}
	if len(r.PerVersion) != 4 || r.PerVersion[1].Delivered != 1 || r.PerVersion[1].GapMs != 300 || r.PerVersion[2].SeenAtS != -1 {
		t.Fatalf("per version %+v", r.PerVersion)
	}
}

func TestParseNetstat(t *testing.T) {
	out := map[string]int64{}
	parseNetstat([]byte("TcpExt: SyncookiesSent ListenOverflows\nTcpExt: 1 7\nIpExt: InNoRoutes\nIpExt: 3\n"), out)
	parseNetstat([]byte("Tcp: RtoAlgorithm RetransSegs\nTcp: 1 42\n"), out)
	if out["TcpExt:ListenOverflows"] != 7 || out["Tcp:RetransSegs"] != 42 || out["IpExt:InNoRoutes"] != 3 {
		t.Fatalf("counters = %v", out)
	}
	d := tcpDelta(map[string]int64{"Tcp:RetransSegs": 40}, out)
	if len(d) != 2 || d["Tcp:RetransSegs"] != 2 || d["TcpExt:ListenOverflows"] != 7 {
		t.Fatalf("delta = %v", d)
	}
}

func TestDriveDoneRoundTrip(t *testing.T) {
	dir := t.TempDir()
	at := time.Now().Round(0)
	if err := writeDriveDone(dir, map[string]time.Time{"fanlead-x-00001": at}); err != nil {
		t.Fatal(err)
	}
	got, err := readDriveDone(dir)
	if err != nil || !got["fanlead-x-00001"].Equal(at) {
		t.Fatalf("read %v, %v", got, err)
	}
}
