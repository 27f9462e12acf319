package main

import (
	"encoding/binary"
	"fmt"
	"github.com/openleaderboard/leaderboard/storage"
	"strings"
	"testing"
	"time"
)

func TestRedisKey(t *testing.T) {
	if got := redisKey("bench-123", "global", "all_time", "u"); got != "bench-123:{global}:all_time:u" {
		t.Fatalf("redisKey = %q", got)
	}
	if got := redisKey("p", matchBoard("m1"), "all_time", "z"); got != "p:{match:m1}:all_time:z" {
		t.Fatalf("match key = %q", got)
	}
	if got := redisVersionKey("p", "big"); got != "p:{big}:ver" {
		t.Fatalf("ver key = %q", got)
	}
}

func TestParseMix(t *testing.T) {
	m, err := parseMix("best=1,incr=1,match=1")
	if err != nil || m != (mix{1, 1, 1}) {
		t.Fatalf("parseMix default = %v, %v", m, err)
	}
	m, err = parseMix(" incr = 2 , match=0.5")
	if err != nil || m != (mix{0, 2, 0.5}) {
		t.Fatalf("parseMix partial = %v, %v", m, err)
	}
	if m.String() != "best=0,incr=2,match=0.5" {
		t.Fatalf("String = %q", m.String())
	}
	for _, bad := range []string{"", "best=0", "best", "foo=1", "best=-1", "best=x", "best=1,best=2", "best=NaN", "best=Inf"} {
		if _, err := parseMix(bad); err == nil {
			t.Errorf("parseMix(%q) accepted", bad)
		}
	}
}

func TestMixPick(t *testing.T) {
	m := mix{1, 2, 1}
	counts := [numKinds]int{}
	const n = 4000
	for i := range n {
		counts[m.pick(float64(i)/n)]++
	}
	if counts != [numKinds]int{1000, 2000, 1000} {
		t.Fatalf("pick shares = %v", counts)
	}
	only := mix{0, 0, 3}
	for _, x := range []float64{0, 0.5, 0.999999, 1} {
		if k := only.pick(x); k != kindMatch {
			t.Fatalf("pick(%v) of match only = %v", x, k)
		}
	}
	if k := (mix{2, 0, 0}).pick(0.9999999999); k != kindBest {
		t.Fatalf("pick of best only = %v", k)
	}
}

func TestParseConfigMixed(t *testing.T) {
	env := func(k string) string {
		return map[string]string{"LEADERBOARD_JWT_SECRET": strings.Repeat("s", 32), "LEADERBOARD_REDIS_PREFIX": "bench-1"}[k]
	}
	var out strings.Builder
	c, err := parseConfig([]string{"-rate", "700"}, env, &out)
	if err != nil {
		t.Fatal(err)
	}
	if c.MixedRate != 700 || c.Mix != (mix{1, 1, 1}) || c.MatchSize != 10 || c.BigEntries != 1000000 || c.IdleDuration != 10*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
	if strings.Join(c.Phases, ",") != "rate,saturation,limiter,mixed,reads,bigreads" {
		t.Fatalf("phases = %v", c.Phases)
	}
	c, err = parseConfig([]string{"-phases", "mixed,bigreads", "-mixed-rate", "50", "-mix", "match=1", "-match-size", "4"}, env, &out)
	if err != nil || c.MixedRate != 50 || c.Mix != (mix{0, 0, 1}) || c.MatchSize != 4 || !c.runs(phaseMixed) || c.runs(phaseRate) {
		t.Fatalf("parseConfig = %+v, %v", c, err)
	}
	for _, bad := range [][]string{{"-mix", "x=1"}, {"-match-size", "0"}, {"-phases", "nope"}, {"-big-board", "global"}, {"-big-entries", "0"}} {
		if _, err := parseConfig(bad, env, &out); err == nil {
			t.Errorf("parseConfig(%v) accepted", bad)
		}
	}
}

func TestUsersAcceptRunningSums(t *testing.T) {
	u := newUsers(4, "u-")
	id, ok := u.acquireKind(kindIncr)
	if !ok {
		t.Fatal("acquire incr")
	}
	// Holding a user for incr does not hold it for the other kinds.
	seen := map[int32]bool{}
	for range 4 {
		b, ok := u.acquireKind(kindMatch)
		if !ok || seen[b] {
			t.Fatalf("acquire match = %d, %v", b, ok)
		}
		seen[b] = true
	}
	if _, ok := u.acquireKind(kindMatch); ok {
		t.Fatal("acquire match with every user held")
	}
	if got := u.accept(kindIncr, id, 5); got != 5 {
		t.Fatalf("first incr = %d", got)
	}
	if got := u.accept(kindIncr, id, 7); got != 12 {
		t.Fatalf("second incr = %d", got)
	}
	if got := u.accept(kindMatch, id, 3); got != 3 {
		t.Fatalf("match sum is its own: %d", got)
	}
	if got := u.accept(kindBest, id, 40); got != 40 || u.best[id] != 40 {
		t.Fatalf("best = %d (%d)", got, u.best[id])
	}
	u.releaseKind(kindIncr, id)
	if _, ok := u.acquireKind(kindIncr); !ok {
		t.Fatal("released user not idle")
	}
}

func TestMatchesAssignment(t *testing.T) {
	m := newMatches(25, 10)
	if len(m.ids) != 3 || m.ids[2] != "bench-m-000002" {
		t.Fatalf("matches = %v", m.ids)
	}
	if m.of(0) != 0 || m.of(9) != 0 || m.of(10) != 1 || m.of(24) != 2 {
		t.Fatal("wrong match of a user")
	}
}

func TestLedgerPipelineRows(t *testing.T) {
	var l ledger
	l.add(event{kind: kindBest, outcome: accepted})
	l.add(event{kind: kindMatch, outcome: accepted})
	l.add(event{kind: kindIncr, outcome: ambiguous})
	l.add(event{kind: kindMatch, outcome: ambiguous})
	l.add(event{kind: kindMatch, outcome: rejected})
	l.add(event{kind: kindBest, outcome: unchanged})
	if want, maybe := l.pipelineRows(); want != 4 || maybe != 4 {
		t.Fatalf("pipelineRows = %d, %d", want, maybe)
	}
}

// historyFixture is four users in matches of two, and events of every kind.
func historyFixture() (*historyCheck, *checkReport, map[string]*event) {
	names := []string{"u0", "u1", "u2", "u3"}
	m := newMatches(4, 2)
	events := []event{
		{id: "b1", user: 0, score: 10, kind: kindBest, outcome: accepted},
		{id: "b2", user: 0, score: 30, kind: kindBest, outcome: accepted},
		{id: "b3", user: 0, score: 50, kind: kindBest, outcome: ambiguous}, // applied
		{id: "b4", user: 1, score: 70, kind: kindBest, outcome: ambiguous}, // not applied
		{id: "i1", user: 1, score: 5, kind: kindIncr, outcome: accepted},
		{id: "i2", user: 1, score: 6, kind: kindIncr, outcome: accepted},
		{id: "i3", user: 1, score: 100, kind: kindIncr, outcome: ambiguous}, // applied
		{id: "m1", user: 2, score: 4, kind: kindMatch, outcome: accepted},
		{id: "m2", user: 2, score: 3, kind: kindMatch, outcome: accepted},
		{id: "m3", user: 3, score: 9, kind: kindMatch, outcome: accepted},
		{id: "m4", user: 1, score: 2, kind: kindMatch, outcome: ambiguous}, // applied
	}
	byID := map[string]*event{}
	for i := range events {
		byID[events[i].id] = &events[i]
	}
	r := &checkReport{}
	periods := map[string]map[string]bool{dailyBoard: {"2026-11-23": true}, seasonBoard: {"1": true}}
	return newHistoryCheck(r, names, m, byID, periods), r, byID
}

// feedAll gives the check every row the events must leave (ambiguous ones included).
func feedAll(h *historyCheck, byID map[string]*event, skip ...string) {
	for _, id := range []string{"b1", "b2", "b3", "i1", "i2", "i3", "m1", "m2", "m3", "m4"} {
		e := byID[id]
		name := h.names[e.user]
		switch e.kind {
		case kindBest:
			h.row(id, "global", "all_time", name, e.score)
		case kindIncr:
			h.row(id, "points", "all_time", name, e.score)
		case kindMatch:
			h.row(id, matchBoard(h.matches.ids[h.matches.of(e.user)]), "all_time", name, e.score)
			if !contains(skip, id+"/daily") {
				h.row(id, "daily", "2026-11-23", name, e.score)
			}
			h.row(id, "season", "1", name, e.score)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestHistoryCheckExpectedValues(t *testing.T) {
	h, r, byID := historyFixture()
	feedAll(h, byID)
	got := h.finish()
	if r.failures() != 0 || r.AmbiguousApplied != 3 || r.HistoryRows != 18 {
		t.Fatalf("report = %+v", r)
	}
	want := map[entryKey]int64{
		{"global", "all_time", 0}:               50, // the best of 10, 30 and the applied ambiguous 50
		{"points", "all_time", 1}:               111,
		{"match:bench-m-000001", "all_time", 2}: 7,
		{"match:bench-m-000001", "all_time", 3}: 9,
		{"match:bench-m-000000", "all_time", 1}: 2,
		{"daily", "2026-11-23", 2}:              7,
		{"daily", "2026-11-23", 3}:              9,
		{"daily", "2026-11-23", 1}:              2,
		{"season", "1", 2}:                      7,
		{"season", "1", 3}:                      9,
		{"season", "1", 1}:                      2,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("expected entries\n got %v\nwant %v", got, want)
	}
}

func TestHistoryCheckFailures(t *testing.T) {
	h, r, byID := historyFixture()
	feedAll(h, byID, "m1/daily", "m4/daily")                       // an accepted and an ambiguous match point lack their daily row
	h.row("b1", "global", "all_time", "u0", 10)                    // twice
	h.row("zz", "global", "all_time", "u0", 1)                     // never sent
	h.row("m2", "daily", "2026-11-24", "u2", 3)                    // a period the service never named
	h.row("i1", "points", "all_time", "u1", 6)                     // wrong value
	h.row("m3", matchBoard("bench-m-000000"), "all_time", "u3", 9) // another match's board
	h.row("b2", "global", "all_time", "u1", 30)                    // wrong user
	h.finish()
	if r.Missing != 1 || r.Partial != 1 || r.Duplicated != 1 || r.Extra != 1 || r.WrongRows != 4 {
		t.Fatalf("report: missing %d partial %d duplicated %d extra %d wrong %d\n%s",
			r.Missing, r.Partial, r.Duplicated, r.Extra, r.WrongRows, strings.Join(r.Examples, "\n"))
	}
}

func TestHistoryCheckMissingRowsStillExpected(t *testing.T) {
	h, r, _ := historyFixture()
	got := h.finish()
	// No rows at all: every 202 is missing, ambiguous sends are not applied, and the
	// entries still name what the 202s must produce (under the known periods).
	if r.Missing != 7 || r.AmbiguousApplied != 0 || r.Partial != 0 {
		t.Fatalf("report = %+v", r)
	}
	if got[entryKey{"daily", "2026-11-23", 2}] != 7 || got[entryKey{"global", "all_time", 0}] != 30 {
		t.Fatalf("expected = %v", got)
	}
}

func TestCompareStored(t *testing.T) {
	names := []string{"u0", "u1", "u2", "u3"}
	index := map[string]int32{"u0": 0, "u1": 1, "u2": 2, "u3": 3}
	var d redisDiff
	compareStored(boardPeriod{"points", "all_time"}, []storage.StoredEntry{
		{UserID: "u0", Score: 5, Sorted: true, SortKey: 5},  // right
		{UserID: "u1", Score: 9, Sorted: true, SortKey: 9},  // wrong value
		{UserID: "zz", Score: 1, Sorted: true, SortKey: 1},  // unexpected
		{UserID: "u3", Score: 4, Sorted: false, SortKey: 0}, // no sorted-set member
	}, map[int32]int64{0: 5, 1: 8, 2: 1, 3: 4}, index, names, &d)
	if d.wrong != 1 || d.missing != 1 || d.extra != 1 || d.zwrong != 1 {
		t.Fatalf("diff = %+v", d)
	}
}

func TestParseProcStat(t *testing.T) {
	line := "4242 (postgres: a) b) S 100 4242 4242 0 -1 4194304 500 0 0 0 1234 567 3 4 20 0 1 0 987654 100000 200 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	s, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if s.pid != 4242 || s.ppid != 100 || s.comm != "postgres: a) b" || s.ticks != 1234+567 || s.start != 987654 {
		t.Fatalf("parseProcStat = %+v", s)
	}
	for _, bad := range []string{"", "12 (x", "12 (x) S 1 2", "x (y) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) accepted", bad)
		}
	}
}

func TestAuxvClockTick(t *testing.T) {
	vec := func(word int, pairs ...uint64) []byte {
		out := make([]byte, len(pairs)*word)
		for i, v := range pairs {
			if word == 4 {
				binary.NativeEndian.PutUint32(out[i*4:], uint32(v))
			} else {
				binary.NativeEndian.PutUint64(out[i*8:], v)
			}
		}
		return out
	}
	if got := auxvClockTick(vec(8, 6, 4096, 17, 250, 0, 0), 8); got != 250 {
		t.Fatalf("64-bit = %d", got)
	}
	if got := auxvClockTick(vec(4, 6, 4096, 17, 100, 0, 0), 4); got != 100 {
		t.Fatalf("32-bit = %d", got)
	}
	if got := auxvClockTick(vec(8, 6, 4096, 0, 0, 17, 300), 8); got != 0 {
		t.Fatalf("after AT_NULL = %d", got)
	}
	if hz := userHZ(); hz <= 0 {
		t.Fatalf("userHZ = %v", hz)
	}
}

func TestPostgresChildGroup(t *testing.T) {
	db := "leaderboard_bench"
	for title, want := range map[string]string{
		"postgres: 15/main: postgres leaderboard_bench 127.0.0.1(43210) idle\x00\x00": grpPostgres,
		"postgres: 15/main: postgres other_db 127.0.0.1(43211) SELECT":                grpPostgresOther,
		"postgres: postgres other_db [local] idle":                                    grpPostgresOther,
		"postgres: 15/main: checkpointer":                                             grpPostgres,
		"postgres: 15/main: autovacuum worker leaderboard_bench":                      grpPostgres,
		"postgres: walwriter":                                                         grpPostgres,
	} {
		if got := postgresChildGroup(title, db); got != want {
			t.Errorf("postgresChildGroup(%q) = %s, want %s", title, got, want)
		}
	}
}

func TestCPUBetween(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := cpuSample{at: t0, procs: map[procKey]procCPU{
		{1, 10}: {group: grpService, ticks: 100},
		{2, 20}: {group: grpPostgres, ticks: 50},
		{3, 30}: {group: grpPostgres, ticks: 70}, // ends before b
		{4, 40}: {group: grpRedis, ticks: 10},
	}}
	b := cpuSample{at: t0.Add(2 * time.Second), procs: map[procKey]procCPU{
		{1, 10}: {group: grpService, ticks: 300}, // +200
		{2, 20}: {group: grpPostgres, ticks: 90}, // +40
		{5, 50}: {group: grpPostgres, ticks: 60}, // new: from zero
		{4, 41}: {group: grpRedis, ticks: 5},     // pid reused: a new process
		{6, 60}: {group: grpLoadgen, ticks: 100}, // new
	}}
	u := cpuBetween(a, b, 100)
	if u.CPUS[grpService] != 2 || u.CPUS[grpPostgres] != 1 || u.CPUS[grpRedis] != 0.05 || u.CPUS[grpLoadgen] != 1 {
		t.Fatalf("cpu = %v", u.CPUS)
	}
	if u.CPUS[grpTotal] != 3.05 || u.Cores[grpService] != 1 || (u.Cores[grpTotal] != 1.52 && u.Cores[grpTotal] != 1.53) {
		t.Fatalf("total %v cores %v", u.CPUS[grpTotal], u.Cores)
	}
	if u.New[grpPostgres] != 1 || u.Gone[grpPostgres] != 1 || u.Gone[grpRedis] != 1 || u.New[grpRedis] != 1 {
		t.Fatalf("new %v gone %v", u.New, u.Gone)
	}
	per := u.perUnit(1000)
	if per[grpService] != 2000 || per[grpTotal] != 3050 {
		t.Fatalf("µs per unit = %v", per)
	}
	if (cpuUsage{}).perUnit(10) != nil || u.perUnit(0) != nil {
		t.Fatal("perUnit without data")
	}
}

func TestPageWalker(t *testing.T) {
	ph := &readPhase{}
	w := &pageWalker{ph: ph, base: "/v1/boards/big/entries?size=100"}
	if p := w.next(nil); p != w.base {
		t.Fatalf("first = %q", p)
	}
	if p := w.next([]byte(`{"entries":[],"next_cursor":"a+b"}`)); p != w.base+"&cursor=a%2Bb" {
		t.Fatalf("second = %q", p)
	}
	if p := w.next(nil); p != w.base+"&cursor=a%2Bb" {
		t.Fatalf("retry = %q", p)
	}
	if p := w.next([]byte(`{"entries":[],"next_cursor":"c"}`)); p != w.base+"&cursor=c" || ph.maxDepth.Load() != 2 {
		t.Fatalf("third = %q, depth %d", p, ph.maxDepth.Load())
	}
	if p := w.next([]byte(`{"entries":[],"next_cursor":null}`)); p != w.base || ph.restarts.Load() != 1 || ph.pagesDeep.Load() != 2 {
		t.Fatalf("restart = %q, restarts %d", p, ph.restarts.Load())
	}
}
