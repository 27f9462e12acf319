package http

import (
	"log/slog"
	"sync"
	"time"
)

// failureLogBurst is how many requests of one route, method and status failLog writes a
// line each for in a second; it counts the rest and writes one line for them.
const failureLogBurst = 10

// failLog writes the log lines of failed requests (5xx). An overloaded or cut-off service
// answers thousands of them a second (503 backlog_full while the pipeline is behind, 503
// unavailable while PostgreSQL is down): a line each cost the service CPU when it had
// none to spare (at 8,000 writes/s offered, 420,000 lines in five minutes) and buried
// everything else in the log. Per route, method and status, the first failureLogBurst of
// each second get their line as before; the others are counted, and when that second
// ends one line says how many there were.
type failLog struct {
	logger *slog.Logger
	now    func() time.Time
	// afterFunc runs f after d (time.AfterFunc; tests run it themselves).
	afterFunc func(d time.Duration, f func())

	mu         sync.Mutex
	window     time.Time // when the current second began
	logged     map[failureKey]int
	suppressed map[failureKey]int
	flushing   bool // a flush of suppressed is scheduled
}

type failureKey struct {
	method, route string
	status        int
}

func newFailLog(logger *slog.Logger) *failLog {
	return &failLog{logger: logger, now: time.Now,
		afterFunc: func(d time.Duration, f func()) { time.AfterFunc(d, f) }}
}

// log records a failed request.
func (l *failLog) log(method, route string, status int, requestID string, took time.Duration) {
	k := failureKey{method, route, status}
	l.mu.Lock()
	t := l.now()
	if l.logged == nil || t.Sub(l.window) >= time.Second || t.Before(l.window) {
		l.flushLocked()
		l.window, l.logged = t, map[failureKey]int{}
	}
	if l.logged[k] < failureLogBurst {
		l.logged[k]++
		l.mu.Unlock()
		l.logger.Warn("request failed", "method", method, "route", route, "status", status,
			"request_id", requestID, "took", took)
		return
	}
	if l.suppressed == nil {
		l.suppressed = map[failureKey]int{}
	}
	l.suppressed[k]++
	if !l.flushing {
		l.flushing = true
		l.afterFunc(l.window.Add(time.Second).Sub(t), l.flush)
	}
	l.mu.Unlock()
}

// flush writes the line of each count of requests not logged one by one.
func (l *failLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

func (l *failLog) flushLocked() {
	for k, n := range l.suppressed {
		l.logger.Warn("requests failed", "method", k.method, "route", k.route, "status", k.status,
			"count", n, "note", "beyond the first few of a second, which were logged one by one")
	}
	clear(l.suppressed)
	l.flushing = false
}
