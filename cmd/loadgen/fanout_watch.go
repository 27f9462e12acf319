package main

import (
	"context"
	"sync"
	"time"
)

// seenVersion is a top version as GET /v1/leaderboard/top first showed it.
type seenVersion struct {
	Version int64     `json:"version"`
	Leader  string    `json:"leader"`
	SeenAt  time.Time `json:"seen_at"`
}

// versionWatch polls the top to learn which versions the service publishes, and when.
type versionWatch struct {
	api *api

	mu      sync.Mutex
	seen    []seenVersion
	polls   int64
	errs    int64
	lastErr string
}

func (w *versionWatch) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		w.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll reads the top once and records its version if it is new.
func (w *versionWatch) poll(ctx context.Context) {
	top, err := getTop(ctx, w.api, 1)
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	if err != nil {
		if ctx.Err() == nil {
			w.errs++
			w.lastErr = err.Error()
		}
		return
	}
	if n := len(w.seen); n > 0 && w.seen[n-1].Version >= top.Version {
		return
	}
	v := seenVersion{Version: top.Version, SeenAt: now}
	if len(top.Entries) > 0 {
		v.Leader = top.Entries[0].UserID
	}
	w.seen = append(w.seen, v)
}

// latest is the newest version seen (-1 before the first poll).
func (w *versionWatch) latest() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) == 0 {
		return -1
	}
	return w.seen[len(w.seen)-1].Version
}

// since returns the versions above v.
func (w *versionWatch) since(v int64) []seenVersion {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []seenVersion
	for _, s := range w.seen {
		if s.Version > v {
			out = append(out, s)
		}
	}
	return out
}
