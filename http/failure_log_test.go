package http

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestFailLogBoundsLinesPerSecond: per route, method and status, the first failureLogBurst
// failed requests of a second get a line each, and the rest one line with their count
// when the second ends (or when the next second's first failure comes first).
func TestFailLogBoundsLinesPerSecond(t *testing.T) {
	var buf bytes.Buffer
	l := newFailLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	var timers []func()
	var delays []time.Duration
	l.afterFunc = func(d time.Duration, f func()) { delays, timers = append(delays, d), append(timers, f) }

	lines := func() (one map[string]int, counted map[string]int) {
		one, counted = map[string]int{}, map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if line == "" {
				continue
			}
			var rec struct {
				Msg    string `json:"msg"`
				Route  string `json:"route"`
				Status int    `json:"status"`
				Count  int    `json:"count"`
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			switch rec.Msg {
			case "request failed":
				one[rec.Route]++
			case "requests failed":
				counted[rec.Route] += rec.Count
			default:
				t.Fatalf("unexpected line %q", line)
			}
		}
		buf.Reset()
		return one, counted
	}

	for range 25 {
		l.log("POST", "/v1/scores", 503, "r", time.Millisecond)
	}
	now = now.Add(400 * time.Millisecond)
	for range 3 {
		l.log("GET", "/v1/leaderboard/top", 503, "r", time.Millisecond)
	}
	one, counted := lines()
	if one["/v1/scores"] != failureLogBurst || one["/v1/leaderboard/top"] != 3 || len(counted) != 0 {
		t.Fatalf("first second: lines %v, counted %v; want %d and 3 lines, nothing counted yet", one, counted, failureLogBurst)
	}
	if len(timers) != 1 || delays[0] != time.Second {
		t.Fatalf("flushes scheduled %d (after %v), want one after 1s", len(timers), delays)
	}
	now = now.Add(600 * time.Millisecond) // the timer fires when the second ends
	timers[0]()
	if one, counted = lines(); len(one) != 0 || counted["/v1/scores"] != 25-failureLogBurst || len(counted) != 1 {
		t.Fatalf("at the second's end: lines %v, counted %v; want one line counting %d", one, counted, 25-failureLogBurst)
	}

	// A new second: lines again; its overflow is counted when the next second's first
	// failure comes before the timer.
	now = now.Add(10 * time.Millisecond)
	for range failureLogBurst + 4 {
		l.log("POST", "/v1/scores", 503, "r", time.Millisecond)
	}
	now = now.Add(time.Second)
	l.log("POST", "/v1/scores", 503, "r", time.Millisecond)
	one, counted = lines()
	if one["/v1/scores"] != failureLogBurst+1 || counted["/v1/scores"] != 4 {
		t.Fatalf("second and third seconds: lines %v, counted %v; want %d lines and 4 counted", one, counted, failureLogBurst+1)
	}
	timers[len(timers)-1]() // nothing left to count: no line
	if one, counted = lines(); len(one)+len(counted) != 0 {
		t.Fatalf("a flush with nothing counted wrote lines %v %v", one, counted)
	}
}

// TestObserveLogsFailuresThroughFailLog: the request middleware's 5xx lines are bounded.
func TestObserveLogsFailuresThroughFailLog(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	s := &server{Deps: Deps{Logger: logger}, metrics: newHTTPMetrics(nil), failures: newFailLog(logger)}
	s.failures.afterFunc = func(time.Duration, func()) {}
	h := s.observe(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	for range 3 * failureLogBurst {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/scores", nil))
	}
	if n := strings.Count(buf.String(), `"msg":"request failed"`); n != failureLogBurst {
		t.Fatalf("%d lines for %d failed requests in a second, want %d:\n%s", n, 3*failureLogBurst, failureLogBurst, buf.String())
	}
}
