package http

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// ctxSeasons lists the seasons as PostgreSQL would: the listing fails when the context of
// the request that runs it ends first.
type ctxSeasons struct {
	once    sync.Once
	listing chan struct{} // closed when the first listing has begun
	release chan struct{}
}

func (s *ctxSeasons) All(ctx context.Context) ([]storage.Season, error) {
	s.once.Do(func() { close(s.listing) })
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.release:
		return []storage.Season{{Board: "season", Name: "2027-spring"}}, nil
	}
}

func (s *ctxSeasons) Start(context.Context, string, string, string, string) (storage.Season, error) {
	return storage.Season{}, nil
}

// TestSeasonListingOutlivesTheRequestThatStartedIt: Periods.seasonsOf shares one listing
// of the seasons among concurrent callers (singleflight), but runs it on the context of the
// caller that happened to start it. When that client hangs up, every other request waiting
// on the listing (a match point's write, GET /v1/boards, a read of the season board) fails
// with the first client's context.Canceled, answered 503 dependency_unavailable, while
// PostgreSQL is fine. This happens whenever the process has no view of the seasons yet: at
// start and right after an admin started a season here (StartSeason drops the view).
// Reads.read runs its shared loads on context.WithoutCancel for this very reason ("Other
// readers wait on this load: it does not end with this one's request").
func TestSeasonListingOutlivesTheRequestThatStartedIt(t *testing.T) {
	cfg, err := configs.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	b, _ := cfg.Board("season")
	store := &ctxSeasons{listing: make(chan struct{}), release: make(chan struct{})}
	p := NewPeriods(cfg, store, newClock().now)

	leaving, hangUp := context.WithCancel(context.Background())
	go func() { _, _ = p.Current(leaving, b) }() // a client that will hang up
	<-store.listing

	type result struct {
		period string
		err    error
	}
	other := make(chan result, 1)
	go func() { // another client's request, which stays
		cur, err := p.Current(context.Background(), b)
		other <- result{cur, err}
	}()
	time.Sleep(50 * time.Millisecond) // it joins the listing under way
	hangUp()
	time.Sleep(50 * time.Millisecond)
	close(store.release)

	select {
	case r := <-other:
		if r.err != nil || r.period != "2027-spring" {
			t.Fatalf("a request that did not hang up: current season %q, error %v; want 2027-spring (another client hung up during the shared listing)", r.period, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer")
	}
}

// noSeasons is a season store where no season was ever started.
type noSeasons struct{}

func (noSeasons) All(context.Context) ([]storage.Season, error) { return nil, nil }
func (noSeasons) Start(context.Context, string, string, string, string) (storage.Season, error) {
	return storage.Season{}, nil
}

// TestListBoardsReadsTheClockOnce: GET /v1/boards answers each board's current_period,
// previous_period and next_reset_at; a client counts down to next_reset_at for
// current_period, and previous_period is "the period before the current one". The handler
// reads the clock separately for each of the three (Periods.Current, Periods.Previous,
// Periods.NextReset, each calling p.now()), so a listing that straddles midnight answers,
// for the daily board, current_period D with previous_period D (not D-1) and/or
// next_reset_at the midnight after D+1: one answer that contradicts itself.
// (submission.Prepare reads the clock once for this very reason: "the write's time and its
// periods agree, at midnight too".) The clock here moves on a microsecond at each reading,
// and the listing starts a few microseconds before a local midnight.
func TestListBoardsReadsTheClockOnce(t *testing.T) {
	cfg, err := configs.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	midnight := time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC) // a Monday: weekly boards roll over too
	bad := 0
	for before := 1; before <= 40; before++ {
		var ticks atomic.Int64
		start := midnight.Add(-time.Duration(before) * time.Microsecond)
		now := func() time.Time { return start.Add(time.Duration(ticks.Add(1)-1) * time.Microsecond) }
		for _, b := range listBoards(t, NewPeriods(cfg, noSeasons{}, now)) {
			def, _ := cfg.Board(b.ID)
			if def.Period != configs.PeriodDaily && def.Period != configs.PeriodWeekly {
				continue
			}
			wantPrev, _ := def.ShiftPeriod(b.CurrentPeriod, -1)
			next, _ := def.ShiftPeriod(b.CurrentPeriod, 1)
			wantReset, _ := def.PeriodStart(next, cfg.Timezone)
			if b.PreviousPeriod != wantPrev || b.NextResetAt == nil || !b.NextResetAt.Equal(wantReset) {
				bad++
				if bad <= 3 {
					t.Errorf("listing begun %d µs before midnight: board %s current_period %s, previous_period %s, next_reset_at %v; want previous %s and reset %s",
						before, b.ID, b.CurrentPeriod, b.PreviousPeriod, b.NextResetAt, wantPrev, wantReset.Format(time.RFC3339))
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d listings answered a board whose current, previous and next reset disagree", bad)
	}
}

// startingSeasons is the season store of a deployment where an admin starts a season on
// another API process: each listing finds one season more than the one before.
type startingSeasons struct {
	mu    sync.Mutex
	calls int
}

func (s *startingSeasons) All(context.Context) ([]storage.Season, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	var out []storage.Season
	for i := 1; i <= s.calls; i++ {
		out = append(out, storage.Season{Board: "season", Name: fmt.Sprintf("s%d", i+1)})
	}
	return out, nil
}

func (s *startingSeasons) Start(context.Context, string, string, string, string) (storage.Season, error) {
	return storage.Season{}, nil
}

// TestListBoardsSeasonPeriodsComeFromOneListing: a season board's current and previous
// periods in one GET /v1/boards answer come from one listing of the seasons. Read from
// two, when the process's view of the seasons (kept seasonsMaxAge, 1 s) expired between
// them and an admin started a season on another process meanwhile, the answer said
// previous_period == current_period (found by a review). Here the view is stale at each
// reading (the clock moves 2 s a reading) and each listing finds one season more.
func TestListBoardsSeasonPeriodsComeFromOneListing(t *testing.T) {
	cfg, err := configs.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		at = at.Add(2 * time.Second)
		return at
	}
	for _, b := range listBoards(t, NewPeriods(cfg, &startingSeasons{}, now)) {
		if b.ID == "season" && b.PreviousPeriod == b.CurrentPeriod {
			t.Errorf("board season: current_period %q and previous_period %q in one answer (two listings of the seasons)", b.CurrentPeriod, b.PreviousPeriod)
		}
	}
}

// listedBoard is a board of GET /v1/boards as the tests read it.
type listedBoard struct {
	ID             string     `json:"id"`
	CurrentPeriod  string     `json:"current_period"`
	PreviousPeriod string     `json:"previous_period"`
	NextResetAt    *time.Time `json:"next_reset_at"`
}

// listBoards answers GET /v1/boards with the shipped boards and periods.
func listBoards(t *testing.T, periods *Periods) []listedBoard {
	t.Helper()
	s := &server{Deps: Deps{Config: periods.cfg, Periods: periods}}
	rec := httptest.NewRecorder()
	s.handleListBoards()(rec, httptest.NewRequest(http.MethodGet, "/v1/boards", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/boards: %d %s", rec.Code, rec.Body)
	}
	var resp struct {
		Boards []listedBoard `json:"boards"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Boards
}

// TestSeasonsAnswerFromTheLastViewWhilePostgresHangs: the view of the seasons is older
// than seasonsMaxAge and PostgreSQL does not answer the listing. A request with a view to
// fall back on answers from it instead of waiting for the listing's 10 s (a read of a
// season board took 20 s, two listings, with Redis up; found by a review of the time
// paths); one without (nothing listed yet) still waits for the listing, and for its own
// request only as long as that lasts, and so does a write.
func TestSeasonsAnswerFromTheLastViewWhilePostgresHangs(t *testing.T) {
	cfg, err := configs.Load(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	b, _ := cfg.Board("season")
	store := &ctxSeasons{listing: make(chan struct{}), release: make(chan struct{})}
	clk := newClock()
	p := NewPeriods(cfg, store, clk.now)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := p.Current(ctx, b); err == nil {
		t.Fatal("no view and no listing: answered anyway")
	}
	close(store.release)
	if cur, err := p.Current(context.Background(), b); err != nil || cur != "2027-spring" {
		t.Fatalf("current season %q, %v", cur, err)
	}

	hang := &ctxSeasons{listing: make(chan struct{}), release: make(chan struct{})}
	defer close(hang.release)
	p.mu.Lock()
	p.seasons = hang
	p.mu.Unlock()
	clk.advance(2 * seasonsMaxAge)
	done := make(chan string, 1)
	go func() {
		cur, err := p.Current(context.Background(), b)
		done <- fmt.Sprint(cur, err)
	}()
	select {
	case got := <-done:
		if got != "2027-spring<nil>" {
			t.Fatalf("with the listing hanging: %s, want the last view's 2027-spring", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("with the listing hanging, a request with a view to answer from waits for the listing")
	}
	<-hang.listing // it did ask PostgreSQL again
	// A write waits for the listing: it must not count for a season another process
	// may have ended (with PostgreSQL only slow, it would be accepted).
	wctx, wcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer wcancel()
	if cur, err := p.WriteAt(wctx, b, clk.now()); err == nil {
		t.Fatalf("a write's season with the listing hanging: %q from the last view, want it to wait for the listing", cur)
	}
}
