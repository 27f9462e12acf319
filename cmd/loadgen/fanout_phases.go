package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ramp opens the streams at cfg.RampRate per second, round-robin over the targets, and
// returns when every attempt has connected or failed.
func (f *fanout) ramp(ctx context.Context) {
	urls := make([]*url.URL, len(f.cfg.Targets))
	for i, t := range f.cfg.Targets {
		urls[i], _ = streamURL(t, f.cfg.Board) // validated with the flags
	}
	secret := []byte(f.cfg.Secret)
	exp := time.Now().Add(2 * time.Hour).Unix()
	f.streams = make([]*stream, f.cfg.Clients)
	f.marks.rampStart = time.Now()
	per := float64(time.Second) / f.cfg.RampRate
	var attempted atomic.Int64
	progress := time.NewTicker(2 * time.Second)
	defer progress.Stop()
	for i := range f.cfg.Clients {
		at := f.marks.rampStart.Add(time.Duration(float64(i) * per))
		sleepCtx(ctx, time.Until(at))
		if ctx.Err() != nil {
			f.streams = f.streams[:i]
			break
		}
		user := f.cfg.UserPrefix + strconv.Itoa(i)
		s := &stream{user: user, target: urls[i%len(urls)]}
		s.last.Store(-1)
		f.streams[i] = s
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, withAudience(jwt.MapClaims{"sub": user, "exp": exp})).SignedString(secret)
		if err != nil {
			s.fail("token", err.Error())
			continue
		}
		s.auth = "Bearer " + tok
		attempted.Add(1)
		f.attempts.Add(1)
		f.readers.Add(1)
		go func() {
			defer f.readers.Done()
			var once sync.Once
			done := func() { once.Do(f.attempts.Done) }
			defer done()
			r, ok := s.connect(ctx, f.cfg.ConnectTimeout, &f.closing, func() { f.connected.Add(1); done() })
			if ok {
				s.read(r, &f.closing, &f.dropped)
			}
		}()
		select {
		case <-progress.C:
			f.logf("  ramp: %d attempted, %d connected", attempted.Load(), f.connected.Load())
		default:
		}
	}
	f.attempts.Wait()
	f.marks.rampEnd = time.Now()
}

// drive runs the leader changes and background writes (or, for a listener, waits for
// the driver's end) and records the window.
func (f *fanout) drive(ctx context.Context) {
	f.marks.driveStart = time.Now()
	until := f.marks.driveStart.Add(f.cfg.Duration)
	switch {
	case f.cfg.Drive:
		f.logf("driving: a new leader every %s and %.0f background writes/s for %s", f.cfg.LeaderEvery, f.cfg.BgRate, f.cfg.Duration)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); f.driver.runLeaders(ctx, f.cfg.LeaderEvery, until) }()
		go func() { defer wg.Done(); f.driver.runBackground(ctx, f.cfg.BgRate, f.cfg.BgUsers, until) }()
		wg.Wait()
		f.accepted = f.driver.accepted()
		if f.cfg.SyncDir != "" {
			if err := writeDriveDone(f.cfg.SyncDir, f.accepted); err != nil {
				f.logf("WARNING: cannot mark the drive done: %v", err)
			}
		}
	case f.cfg.SyncDir != "":
		f.logf("listening until the driver marks the drive done")
		if !waitFiles(ctx, f.cfg.SyncDir, "drive-done", 1, f.cfg.Duration+f.cfg.SyncTimeout) {
			f.logf("WARNING: no drive-done mark within %s", f.cfg.Duration+f.cfg.SyncTimeout)
		} else if acc, err := readDriveDone(f.cfg.SyncDir); err != nil {
			f.logf("WARNING: %v", err)
		} else {
			f.accepted = acc
		}
	default:
		f.logf("listening for %s (no drive)", f.cfg.Duration)
		sleepCtx(ctx, f.cfg.Duration)
	}
	f.marks.driveEnd = time.Now()
}

// barrier marks this loadgen ramped in the sync dir and waits for its peers.
func (f *fanout) barrier(ctx context.Context) error {
	if f.cfg.SyncDir == "" {
		return nil
	}
	name := "ready-" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(filepath.Join(f.cfg.SyncDir, name), nil, 0o644); err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	f.logf("ramped; waiting for %d loadgens in %s", f.cfg.Peers, f.cfg.SyncDir)
	if !waitFiles(ctx, f.cfg.SyncDir, "ready-*", f.cfg.Peers, f.cfg.SyncTimeout) {
		return errors.New("the peers did not all ramp within -sync-timeout")
	}
	return nil
}

// waitFiles waits until dir holds at least n files matching pattern.
func waitFiles(ctx context.Context, dir, pattern string, n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if m, _ := filepath.Glob(filepath.Join(dir, pattern)); len(m) >= n {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// closeStreams ends every open stream and waits for the readers.
func (f *fanout) closeStreams() {
	f.closing.Store(true)
	for _, s := range f.streams {
		if s != nil {
			s.close()
		}
	}
	f.readers.Wait()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
