package main

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestLimiterSchedule(t *testing.T) {
	runs := limiterSchedule(30*time.Second, 3)
	var got []string
	for _, r := range runs {
		if r.d != 10*time.Second {
			t.Fatalf("run %s lasts %s, want 10s", r.name(), r.d)
		}
		got = append(got, r.name())
	}
	// A steady drift falls on both settings alike: off, on, on, off, off, on.
	want := []string{"limiter off 1/3", "limiter on 1/3", "limiter on 2/3", "limiter off 2/3", "limiter off 3/3", "limiter on 3/3"}
	if !slices.Equal(got, want) {
		t.Fatalf("schedule = %v, want %v", got, want)
	}
	// Each setting gets the whole duration.
	per := map[string]time.Duration{}
	for _, r := range limiterSchedule(9*time.Second, 3) {
		per[r.setting] += r.d
	}
	if per[limiterOff] != 9*time.Second || per[limiterOn] != 9*time.Second {
		t.Fatalf("time per setting = %v", per)
	}
	if limiterSchedule(time.Second, 0) != nil {
		t.Fatal("0 rounds should give no runs")
	}
}

func TestParseConfigLimiter(t *testing.T) {
	env := func(k string) string {
		return map[string]string{"LEADERBOARD_JWT_SECRET": strings.Repeat("s", 32), "LEADERBOARD_REDIS_PREFIX": "bench-1"}[k]
	}
	var out strings.Builder
	c, err := parseConfig(nil, env, &out)
	if err != nil || c.LimiterDuration != 20*time.Second || !c.runs(phaseLimiter) || c.LimiterDurS != "20s" {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	if i := slices.Index(c.Phases, phaseLimiter); i < 1 || c.Phases[i-1] != phaseSaturation {
		t.Fatalf("limiter should follow saturation: %v", c.Phases)
	}
	c, err = parseConfig([]string{"-phases", "limiter", "-limiter-duration", "8s"}, env, &out)
	if err != nil || c.LimiterDuration != 8*time.Second || c.runs(phaseSaturation) {
		t.Fatalf("parseConfig = %+v, %v", c, err)
	}
	if _, err := parseConfig([]string{"-limiter-duration", "500ms"}, env, &out); err == nil {
		t.Fatal("-limiter-duration 500ms accepted")
	}
}

func TestPlayerTokens(t *testing.T) {
	secret := strings.Repeat("k", 32)
	now := time.Unix(1_700_000_000, 0)
	var clock sync.Mutex
	p := newPlayerTokens(secret, func() time.Time { clock.Lock(); defer clock.Unlock(); return now })
	advance := func(d time.Duration) { clock.Lock(); now = now.Add(d); clock.Unlock() }

	a1, err := p.auth("bench-u-000001")
	if err != nil {
		t.Fatal(err)
	}
	raw, ok := strings.CutPrefix(a1, "Bearer ")
	if !ok {
		t.Fatalf("auth = %q, want a Bearer header", a1)
	}
	claims := jwt.MapClaims{}
	_, err = jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithTimeFunc(func() time.Time { return now })).
		ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return []byte(secret), nil })
	if err != nil {
		t.Fatalf("parse player token: %v", err)
	}
	if claims["sub"] != "bench-u-000001" {
		t.Fatalf("sub = %v", claims["sub"])
	}
	if _, has := claims["roles"]; has {
		t.Fatalf("a player token must carry no roles: %v", claims)
	}
	if _, has := claims["name"]; has {
		t.Fatalf("no name wanted: %v", claims)
	}
	iat, _ := claims.GetIssuedAt()
	exp, _ := claims.GetExpirationTime()
	if !iat.Time.Equal(now) || exp.Time.Sub(iat.Time) != time.Hour {
		t.Fatalf("iat %v exp %v: want now and now+1h", iat, exp)
	}

	// Cached per user.
	if again, _ := p.auth("bench-u-000001"); again != a1 || p.minted.Load() != 1 {
		t.Fatalf("second call minted again (minted %d)", p.minted.Load())
	}
	other, _ := p.auth("bench-u-000002")
	if other == a1 || p.minted.Load() != 2 {
		t.Fatalf("another user shares the token (minted %d)", p.minted.Load())
	}
	// Still cached with more than 5 minutes left, replaced with less.
	advance(54 * time.Minute)
	if again, _ := p.auth("bench-u-000001"); again != a1 {
		t.Fatal("re-minted with 6 minutes left")
	}
	advance(2 * time.Minute)
	fresh, _ := p.auth("bench-u-000001")
	if fresh == a1 || p.minted.Load() != 3 {
		t.Fatalf("not re-minted with 4 minutes left (minted %d)", p.minted.Load())
	}

	// Concurrent use.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				if _, err := p.auth("u-" + string(rune('a'+(i+j)%5))); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

func TestParseScriptCalls(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=1079920,usec=199343643,usec_per_call=184.59,rejected_calls=0,failed_calls=29\r\n" +
		"cmdstat_eval:calls=29,usec=13528,usec_per_call=466.48,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hmget:calls=500,usec=10,usec_per_call=0.02\r\n" +
		"cmdstat_fcall:calls=1,usec=1,usec_per_call=1\r\n" +
		"cmdstat_evalsha_ro:calls=2,usec=1,usec_per_call=1\r\n"
	if got := parseScriptCalls(info); got != 1079920+29+1+2 {
		t.Fatalf("parseScriptCalls = %d", got)
	}
	if got := parseScriptCalls(""); got != 0 {
		t.Fatalf("empty = %d", got)
	}
}

func TestMergeErrors(t *testing.T) {
	got := mergeErrors(
		[]errorCount{{Key: "503 limiter_unavailable", Count: 2, Sample: "down"}, {Key: "429 rate_limited", Count: 1}},
		[]errorCount{{Key: "429 rate_limited", Count: 4, Sample: "slow down"}},
		nil,
	)
	want := []errorCount{{Key: "429 rate_limited", Count: 5, Sample: "slow down"}, {Key: "503 limiter_unavailable", Count: 2, Sample: "down"}}
	if !slices.Equal(got, want) {
		t.Fatalf("mergeErrors = %+v", got)
	}
}

func TestBuildLimiterReport(t *testing.T) {
	lat := func(ms ...int) []time.Duration {
		var out []time.Duration
		for _, m := range ms {
			out = append(out, time.Duration(m)*time.Millisecond)
		}
		return out
	}
	cpu := func(service, redis float64) map[string]float64 {
		return map[string]float64{grpService: service, grpRedis: redis, grpTotal: service + redis}
	}
	runs := []limiterRunFigures{
		{setting: limiterOff, round: 1, window: 10 * time.Second, accepted: 10010, inWindow: 10000, latencies: lat(1, 2, 3),
			cpuWindow: cpu(1, 0.5), cpuDrained: cpu(2, 1), scripts: 10010, scriptsOK: true},
		{setting: limiterOn, round: 1, window: 10 * time.Second, accepted: 9005, inWindow: 9000, latencies: lat(2, 4),
			cpuWindow: cpu(1, 0.6), cpuDrained: cpu(2, 1.2), scripts: 18010, scriptsOK: true},
		{setting: limiterOff, round: 2, window: 10 * time.Second, accepted: 8000, inWindow: 8000, latencies: lat(5),
			cpuWindow: cpu(1, 0.5), cpuDrained: cpu(2, 1), scripts: 8000, scriptsOK: true},
		{setting: limiterOn, round: 2, window: 10 * time.Second, accepted: 8005, inWindow: 8000, latencies: lat(6, 100),
			errors: []errorCount{{Key: "429 rate_limited", Count: 3}}, cpuWindow: cpu(1, 0.6), cpuDrained: cpu(2, 1.2), scripts: 16000, scriptsOK: true},
	}
	r := buildLimiterReport(runs, 128, true)
	if r.Off.Runs != 2 || r.On.Runs != 2 || r.Off.WindowS != 20 {
		t.Fatalf("runs: %+v", r)
	}
	if r.Off.AcceptedPerS != 900 || r.On.AcceptedPerS != 850 {
		t.Fatalf("accepted/s off %v on %v, want 900 and 850", r.Off.AcceptedPerS, r.On.AcceptedPerS)
	}
	if !slices.Equal(r.Off.RunAcceptedPerS, []float64{1000, 800}) || !slices.Equal(r.On.RunAcceptedPerS, []float64{900, 800}) {
		t.Fatalf("per run: off %v on %v", r.Off.RunAcceptedPerS, r.On.RunAcceptedPerS)
	}
	if r.AcceptedRatio != 0.944 || r.CostPct != 5.56 || !r.WithinTarget {
		t.Fatalf("ratio %v cost %v within %v", r.AcceptedRatio, r.CostPct, r.WithinTarget)
	}
	if !slices.Equal(r.RoundRatios, []float64{0.9, 1}) {
		t.Fatalf("round ratios %v", r.RoundRatios)
	}
	if r.Off.Accepted != 18010 || r.On.Accepted != 17010 || r.On.AcceptLatency.Count != 4 || r.Off.AcceptLatency.P99 != 5 {
		t.Fatalf("accepted/latency: off %+v on %+v", r.Off, r.On)
	}
	if r.On.RateLimited != 3 || r.On.ErrorsTotal != 3 || r.Off.RateLimited != 0 {
		t.Fatalf("429s: off %d on %d", r.Off.RateLimited, r.On.RateLimited)
	}
	if r.Off.CPUSpan != "start..drained" || r.Off.UsPerAccepted[grpService] != round2(4e6/18010) || r.On.UsPerAcceptedWindow[grpRedis] != round2(1.2e6/17010) {
		t.Fatalf("cpu: off %v on %v", r.Off.UsPerAccepted, r.On.UsPerAcceptedWindow)
	}
	if r.ServiceCPURatio != round3((4e6/17010)/(4e6/18010)) {
		t.Fatalf("service CPU ratio %v", r.ServiceCPURatio)
	}
	if r.Off.ScriptCallsPerAccepted == nil || *r.Off.ScriptCallsPerAccepted != 1 || *r.On.ScriptCallsPerAccepted != round2(34010.0/17010) {
		t.Fatalf("scripts: off %v on %v", r.Off.ScriptCallsPerAccepted, r.On.ScriptCallsPerAccepted)
	}
	if !slices.Equal(r.Schedule, []string{"off 1", "on 1", "off 2", "on 2"}) {
		t.Fatalf("schedule %v", r.Schedule)
	}
	notes := strings.Join(r.Notes, "\n")
	if !strings.Contains(notes, "3 player writes were refused with 429") || strings.Contains(notes, "does not seem to run") {
		t.Fatalf("notes: %s", notes)
	}
	if v := limiterVerdict(r); !strings.Contains(v, "costs 5.6 %") || !strings.Contains(v, "met") {
		t.Fatalf("verdict: %s", v)
	}

	// Rounds that agree: no noise note; on faster than off: no cost.
	quiet := []limiterRunFigures{
		{setting: limiterOff, round: 1, window: time.Second, accepted: 100, inWindow: 100},
		{setting: limiterOn, round: 1, window: time.Second, accepted: 102, inWindow: 102},
		{setting: limiterOff, round: 2, window: time.Second, accepted: 100, inWindow: 100},
		{setting: limiterOn, round: 2, window: time.Second, accepted: 104, inWindow: 104},
	}
	if q := buildLimiterReport(quiet, 1, true); len(q.Notes) != 0 || q.CostPct != -3 || !q.WithinTarget || !strings.Contains(limiterVerdict(q), "3.0 % faster") {
		t.Fatalf("quiet: notes %v cost %v verdict %s", q.Notes, q.CostPct, limiterVerdict(q))
	}

	noisy := slices.Clone(quiet)
	noisy[3].inWindow = 130
	if q := buildLimiterReport(noisy, 1, true); len(q.Notes) != 1 || !strings.Contains(q.Notes[0], "from 1.020 to 1.300") {
		t.Fatalf("noisy: notes %v", q.Notes)
	}

	// A run that did not drain: CPU over the windows; no service CPU measured: none shown.
	runs[3].cpuDrained = nil
	r = buildLimiterReport(runs, 128, false)
	if r.On.CPUSpan != "window" || r.Off.CPUSpan != "start..drained" || r.ServiceCPURatio != 0 {
		t.Fatalf("span on %q off %q ratio %v", r.On.CPUSpan, r.Off.CPUSpan, r.ServiceCPURatio)
	}
	if _, ok := r.On.UsPerAccepted[grpService]; ok {
		t.Fatalf("service CPU shown without a service pid: %v", r.On.UsPerAccepted)
	}

	// Over the target, and a limiter that makes no script calls.
	slow := []limiterRunFigures{
		{setting: limiterOff, round: 1, window: time.Second, accepted: 100, inWindow: 100, scripts: 100, scriptsOK: true},
		{setting: limiterOn, round: 1, window: time.Second, accepted: 80, inWindow: 80, scripts: 80, scriptsOK: true},
	}
	r = buildLimiterReport(slow, 4, true)
	if r.AcceptedRatio != 0.8 || r.CostPct != 20 || r.WithinTarget {
		t.Fatalf("slow: ratio %v cost %v within %v", r.AcceptedRatio, r.CostPct, r.WithinTarget)
	}
	notes = strings.Join(r.Notes, "\n")
	if !strings.Contains(notes, "does not seem to run") || !strings.Contains(notes, "over the 10 % target") {
		t.Fatalf("slow notes: %s", notes)
	}
	if v := limiterVerdict(r); !strings.Contains(v, "NOT met") {
		t.Fatalf("slow verdict: %s", v)
	}

	// Nothing accepted with the limiter off: no ratio.
	r = buildLimiterReport([]limiterRunFigures{{setting: limiterOff, round: 1, window: time.Second}}, 1, true)
	if r.AcceptedRatio != 0 || r.WithinTarget || len(r.RoundRatios) != 0 || !strings.Contains(limiterVerdict(r), "no ratio") {
		t.Fatalf("empty: %+v", r)
	}
}
