package storage_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestLoadNotesOnlyRenamesAndOnlyWhileItRuns: while a load on demand is under way, the
// projector's applies note the new names of the users they rename, and no other name (a
// review found every name of every apply noted: a seal then wrote a hash of every writer
// in one script, past the client's timeout on a busy board). A load that fails leaves
// nothing behind: with its token left in the hash of loads, every apply went on noting
// for ten minutes. After the loads, neither hash is left.
func TestLoadNotesOnlyRenamesAndOnlyWhileItRuns(t *testing.T) {
	rdb, prefix := newTestRedis(t)
	ctx := testContext(t)
	boards := storage.NewBoards(rdb, prefix, 10)
	loading, renamed := prefix+":{global}:all_time:loading", prefix+":{global}:all_time:renamed"
	now := time.Now()
	apply := func(from, to int, renames ...string) {
		t.Helper()
		var states []storage.EntryState
		nicks := map[string]string{}
		for j := from; j < to; j++ {
			u := fmt.Sprintf("u%04d", j)
			s := state(u, int64(j), 1, now)
			nicks[u] = "Name " + u
			for _, r := range renames {
				if r == u {
					s.Renamed, nicks[u] = true, "New "+u
				}
			}
			states = append(states, s)
		}
		if _, _, err := boards.Apply(ctx, global, states, nicks); err != nil && !errors.Is(err, storage.ErrNotLoaded) {
			t.Fatal(err)
		}
	}
	left := func(when string) {
		t.Helper()
		if n, err := rdb.Exists(ctx, loading, renamed).Result(); err != nil || n != 0 {
			t.Errorf("%s: %d of the hashes of loads and renames left (%v), want none", when, n, err)
		}
	}
	if _, err := boards.Load(ctx, global, func() ([]storage.EntryState, map[string]string, error) {
		return nil, nil, errors.New("read board entries: PostgreSQL unavailable")
	}); err == nil {
		t.Fatal("a load whose page read failed sealed")
	}
	left("after a load whose first page read failed")
	apply(0, 100, "u0007")
	left("after applies with no load under way")
	var noted map[string]string
	if _, err := boards.Load(ctx, global, func() ([]storage.EntryState, map[string]string, error) {
		if noted != nil {
			return nil, nil, nil
		}
		apply(0, 500, "u0003", "u0250") // while the load runs: the board is not loaded
		var err error
		if noted, err = rdb.HGetAll(ctx, renamed).Result(); err != nil {
			t.Fatal(err)
		}
		return []storage.EntryState{state("u0003", 3, 1, now), state("u0250", 250, 1, now)}, map[string]string{"u0003": "Name u0003", "u0250": "Name u0250"}, nil
	}); err != nil {
		t.Fatalf("load: %v", err)
	}
	if len(noted) != 2 || noted["u0003"] != "New u0003" || noted["u0250"] != "New u0250" {
		t.Errorf("names noted while the load ran: %v, want the two renames only", noted)
	}
	for _, u := range []string{"u0003", "u0250"} {
		if nick, err := rdb.HGet(ctx, prefix+":{global}:all_time:n", u).Result(); err != nil || nick != "New "+u {
			t.Errorf("%s's name on the loaded board: %q %v, want the rename's", u, nick, err)
		}
	}
	left("after the load sealed")
}
