package http

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestPGReadsForgetUsers: a process serves reads of any number of users; the turn of each
// is kept only while one of its reads runs or waits, so the map does not grow with every
// user who ever read a closed period (a leak a long-lived API process would carry), also
// when a read gave up waiting.
func TestPGReadsForgetUsers(t *testing.T) {
	t.Parallel()
	g := newPGReads(2, 50*time.Millisecond)
	users := func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.users)
	}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			_ = g.do(context.Background(), fmt.Sprintf("u%d", i%50), func() error { time.Sleep(time.Millisecond); return nil })
		})
	}
	wg.Wait()
	if n := users(); n != 0 {
		t.Errorf("%d users kept after every read ended", n)
	}
	release, running := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- g.do(context.Background(), "busy", func() error { close(running); <-release; return nil })
	}()
	<-running
	if err := g.do(context.Background(), "busy", func() error { return nil }); !errors.Is(err, errReadsQueued) {
		t.Errorf("a second read of a busy user: %v, want errReadsQueued", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := users(); n != 0 {
		t.Errorf("%d users kept after a read gave up waiting", n)
	}
}
