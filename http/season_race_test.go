package http

import (
	"context"
	"testing"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// slowSeasons is a season store whose first listing is slow: it read the seasons before
// an admin started one, and answers after.
type slowSeasons struct {
	memSeasons
	listing chan struct{} // closed when the slow listing has read
	release chan struct{} // the slow listing answers once this is closed
	calls   int
}

func (s *slowSeasons) All(ctx context.Context) ([]storage.Season, error) {
	snapshot, _ := s.memSeasons.All(ctx)
	s.mu.Lock()
	s.calls++
	first := s.calls == 1
	s.mu.Unlock()
	if first {
		close(s.listing)
		<-s.release
	}
	return snapshot, nil
}

// TestStartedSeasonIsCurrentAtOnceDespiteAListingUnderWay: "A season started by an admin is current on the
// process that started it at once". A listing of the seasons that was under way when the
// admin started one must not bring the old current season back.
func TestStartedSeasonIsCurrentAtOnceDespiteAListingUnderWay(t *testing.T) {
	cfg, _ := configs.Load(func(string) string { return "" })
	b, _ := cfg.Board("season")
	store := &slowSeasons{listing: make(chan struct{}), release: make(chan struct{})}
	clk := newClock() // stands still: the fetched view stays fresh for this test
	p := NewPeriods(cfg, store, clk.now)
	done := make(chan struct{})
	go func() { // a read (a write's Prepare, a GET) lists the seasons
		defer close(done)
		_, _ = p.Current(context.Background(), b)
	}()
	<-store.listing
	if _, err := p.StartSeason(context.Background(), b, "2027-spring", "ops", "test"); err != nil {
		t.Fatal(err)
	}
	close(store.release)
	<-done
	cur, err := p.Current(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if cur != "2027-spring" {
		t.Fatalf("right after the admin started 2027-spring, the current season here is %q", cur)
	}
}
