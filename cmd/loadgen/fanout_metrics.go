package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// sseMetrics are the hub's Prometheus series of one API process.
type sseMetrics struct {
	Streams    float64 `json:"sse_clients"`
	Dropped    float64 `json:"sse_dropped_total"`
	TopEvents  float64 `json:"sse_leaderboard_events_total"`
	UserEvents float64 `json:"sse_user_events_total"`
	Error      string  `json:"error,omitempty"`
}

// scrapeSSE reads the hub's series from target/metrics.
func scrapeSSE(ctx context.Context, client *http.Client, target string) sseMetrics {
	var m sseMetrics
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target+"/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		m.Error = err.Error()
		return m
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		m.Error = fmt.Sprintf("/metrics answered %d", resp.StatusCode)
		return m
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "leaderboard_sse_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		switch name := line[:i]; name {
		case "leaderboard_sse_clients":
			m.Streams = v
		case "leaderboard_sse_dropped_total":
			m.Dropped = v
		case `leaderboard_sse_events_total{event="leaderboard.updated"}`:
			m.TopEvents = v
		case `leaderboard_sse_events_total{event="user.rank.updated"}`:
			m.UserEvents = v
		}
	}
	if err := sc.Err(); err != nil {
		m.Error = err.Error()
	}
	return m
}
