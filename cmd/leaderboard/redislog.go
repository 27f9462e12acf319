package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// redisLog routes go-redis's own log lines (its pool's dial failures, several a second
// while Redis is down) into the service's JSON log as warnings, at most one of a kind (the
// line, its numbers aside: go-redis writes most lines with the format "%s") every
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
	line := fmt.Sprintf(format, v...)
	kind := strings.Map(func(r rune) rune { // lines that differ in numbers only are one kind
		if r >= '0' && r <= '9' {
			return '#'
		}
		return r
	}, line)
	now := l.now()
	l.mu.Lock()
	prev, seen := l.last[kind]
	if seen && now.Sub(prev.at) < redisLogEvery {
		prev.skipped++
		l.last[kind] = prev
		l.mu.Unlock()
		return
	}
	l.last[kind] = redisLogLine{at: now}
	l.mu.Unlock()
	l.logger.Warn("redis client", "line", line, "like_it_since_last", prev.skipped)
}
