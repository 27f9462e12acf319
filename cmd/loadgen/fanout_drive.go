package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Score bands of the drive, far apart so the roles never mix: background writes stay below
// the seeded entries, which fill the cached top-N, so only leader changes change it.
const (
	bgScoreEpoch = 1_600_000_000_000 // background score = Unix ms - this: ~1e11, rising
	seedScore    = 1_000_000_000_000 // seeded entries: seedScore + i
	leaderFloor  = 2_000_000_000_000 // leaders start above this and above the current top
)

// driver posts the top changes of a fan-out run through one API process.
type driver struct {
	api *api
	tag string // distinguishes this run's leaders: fanlead-<tag>-<k>

	base            int64 // leader k scores base + k
	leadersPosted   atomic.Int64
	leadersAccepted atomic.Int64
	leaderErrs      counter
	mu              sync.Mutex
	acceptedAt      map[string]time.Time // leader user -> when its 202 was read

	bgIssued, bgAccepted, bgUnchanged, bgDropped atomic.Int64
	bgErrs                                       counter
}

func newDriver(a *api) *driver {
	return &driver{api: a, tag: strconv.FormatInt(time.Now().UnixMilli(), 36), acceptedAt: map[string]time.Time{}}
}

// topAnswer is GET /v1/leaderboard/top.
type topAnswer struct {
	Version int64 `json:"version"`
	Entries []struct {
		UserID string `json:"user_id"`
		Score  int64  `json:"score"`
	} `json:"entries"`
}

func getTop(ctx context.Context, a *api, limit int) (topAnswer, error) {
	var t topAnswer
	ans, err := a.do(ctx, http.MethodGet, "/v1/leaderboard/top?limit="+strconv.Itoa(limit), nil)
	if err != nil {
		return t, err
	}
	if ans.status != http.StatusOK {
		return t, fmt.Errorf("GET /v1/leaderboard/top: %d %s %s", ans.status, ans.code, ans.msg)
	}
	if err := json.Unmarshal(ans.body, &t); err != nil {
		return t, fmt.Errorf("GET /v1/leaderboard/top: %w", err)
	}
	return t, nil
}

// seed puts n entries at seedScore+i (idempotent: a repeat answers "unchanged") and waits
// until Redis shows them in the top, then sets the leaders' base above the current top.
func (d *driver) seed(ctx context.Context, n int) error {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var failures counter
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			user := fmt.Sprintf("fanseed-%04d", i)
			ans, err := d.api.submit(ctx, "fanseed-"+strconv.Itoa(i), user, seedScore+int64(i))
			if err != nil || (ans.status != http.StatusAccepted && ans.status != http.StatusOK) {
				failures.add(errorKey(ans, err))
			}
		}()
	}
	wg.Wait()
	if rows := failures.rows(); len(rows) > 0 {
		return fmt.Errorf("seeding: %d failed, e.g. %s %s", failures.total(), rows[0].Key, rows[0].Sample)
	}
	want := min(n, 100)
	deadline := time.Now().Add(30 * time.Second)
	for {
		top, err := getTop(ctx, d.api, max(want, 1))
		if err != nil {
			return err
		}
		if want == 0 || (len(top.Entries) >= want && top.Entries[want-1].Score >= seedScore) {
			d.base = leaderFloor
			if len(top.Entries) > 0 {
				d.base = max(d.base, top.Entries[0].Score)
			}
			d.base += 1000
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("seeding: the top does not show the %d seeded entries after 30s", want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runLeaders posts a new highest score every interval until the deadline, each from a new
// user, asynchronously so a slow answer does not shift the schedule.
func (d *driver) runLeaders(ctx context.Context, interval time.Duration, until time.Time) {
	var wg sync.WaitGroup
	start := time.Now()
	for k := int64(1); ctx.Err() == nil; k++ {
		at := start.Add(time.Duration(k-1) * interval)
		if !at.Before(until) {
			break
		}
		time.Sleep(time.Until(at))
		user := fmt.Sprintf("fanlead-%s-%05d", d.tag, k)
		d.leadersPosted.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ans, err := d.api.submit(ctx, uuid.NewString(), user, d.base+k)
			if err != nil || ans.status != http.StatusAccepted {
				d.leaderErrs.add(errorKey(ans, err))
				return
			}
			d.leadersAccepted.Add(1)
			d.mu.Lock()
			d.acceptedAt[user] = time.Now()
			d.mu.Unlock()
		}()
	}
	wg.Wait()
}

// runBackground offers rate score writes per second until the deadline, open loop, below
// the seeded band; at most 64 in flight, the rest dropped and counted.
func (d *driver) runBackground(ctx context.Context, rate float64, users int, until time.Time) {
	if rate <= 0 {
		return
	}
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	start := time.Now()
	per := float64(time.Second) / rate
	for i := 0; ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(float64(i) * per))
		if !at.Before(until) {
			break
		}
		time.Sleep(time.Until(at))
		select {
		case sem <- struct{}{}:
		default:
			d.bgDropped.Add(1)
			continue
		}
		d.bgIssued.Add(1)
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			user := fmt.Sprintf("fanbg-%05d", i%users)
			ans, err := d.api.submit(ctx, uuid.NewString(), user, time.Now().UnixMilli()-bgScoreEpoch)
			switch {
			case err == nil && ans.status == http.StatusAccepted:
				d.bgAccepted.Add(1)
			case err == nil && ans.status == http.StatusOK:
				d.bgUnchanged.Add(1)
			default:
				d.bgErrs.add(errorKey(ans, err))
			}
		}()
	}
	wg.Wait()
}

// accepted returns when each leader's score was accepted (its 202 read).
func (d *driver) accepted() map[string]time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.acceptedAt)
}

// driveDone is what the driver leaves in the sync dir when the drive ends, so a listener
// can time its streams from the leaders' 202s too.
type driveDone struct {
	Accepted map[string]time.Time `json:"leaders_accepted"`
}

// writeDriveDone writes the mark atomically (a listener polls for it).
func writeDriveDone(dir string, accepted map[string]time.Time) error {
	data, err := json.Marshal(driveDone{Accepted: accepted})
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".drive-done.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "drive-done"))
}

func readDriveDone(dir string) (map[string]time.Time, error) {
	data, err := os.ReadFile(filepath.Join(dir, "drive-done"))
	if err != nil {
		return nil, err
	}
	var d driveDone
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("drive-done: %w", err)
	}
	return d.Accepted, nil
}
