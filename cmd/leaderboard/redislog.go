package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// redisLog routes go-redis's own log lines (its pool's dial failures, several a second
// while Redis is down) into the service's JSON log as warnings, at most one a format every
// redisLogEvery, counting the ones left out: go-redis otherwise writes plain text to stderr.
type redisLog struct {
	logger *slog.Logger
	now    func() time.Time
	mu     sync.Mutex
	last   map[string]redisLogLine
}

type redisLogLine struct {
	at      time.Time
	skipped int
}

const redisLogEvery = 10 * time.Second

func newRedisLog(logger *slog.Logger, now func() time.Time) *redisLog {
	return &redisLog{logger: logger, now: now, last: map[string]redisLogLine{}}
}

func (l *redisLog) Printf(_ context.Context, format string, v ...any) {
	now := l.now()
	l.mu.Lock()
	prev, seen := l.last[format]
	if seen && now.Sub(prev.at) < redisLogEvery {
		prev.skipped++
		l.last[format] = prev
		l.mu.Unlock()
		return
	}
	l.last[format] = redisLogLine{at: now}
	l.mu.Unlock()
	l.logger.Warn("redis client", "line", fmt.Sprintf(format, v...), "like_it_since_last", prev.skipped)
}
