package storage_test

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// bucketKeys lists a board period's entry-hash buckets beyond the first (u:1, u:2, ...).
func (f *boardsFixture) bucketKeys(board, period string) []string {
	f.t.Helper()
	keys, err := f.rdb.Keys(testContext(f.t), f.prefix+":{"+board+"}:"+period+":u:*").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return keys
}

// bigStates are n entries of global, scores with many ties, one version.
func bigStates(n int, version int64) []storage.EntryState {
	out := make([]storage.EntryState, n)
	for i := range out {
		out[i] = state(fmt.Sprintf("user-%05d", i), int64(i*7919%(n/3+1)), version, at(i))
	}
	return out
}

// TestEntryHashesSplitAndStayCompact: a board that grows spreads its entries over buckets
// small enough for Redis's compact encoding (128 fields by default), and every read finds
// every entry at its rank while it grows and after most entries leave.
func TestEntryHashesSplitAndStayCompact(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	ctx := testContext(t)
	const n = 3000
	states := bigStates(n, 1)
	for start := 0; start < n; start += 250 {
		f.apply(nil, states[start:start+250]...)
	}
	buckets := f.bucketKeys("global", "all_time")
	if len(buckets) < n/80 {
		t.Fatalf("%d entries in %d buckets", n, len(buckets)+1)
	}
	for _, k := range append(buckets, f.prefix+":{global}:all_time:u") {
		if l := f.rdb.HLen(ctx, k).Val(); l > 128 {
			t.Errorf("bucket %s holds %d fields", k, l)
		}
	}

	// The expected order: higher score first, then earlier reach.
	want := append([]storage.EntryState(nil), states...)
	sort.SliceStable(want, func(i, j int) bool {
		if want[i].Score != want[j].Score {
			return want[i].Score > want[j].Score
		}
		return want[i].ReachedAt.Before(want[j].ReachedAt)
	})
	checkRanks := func(want []storage.EntryState) {
		t.Helper()
		var after *storage.Position
		seen := 0
		for {
			page, err := f.boards.Page(ctx, "global", "all_time", after, 700)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			for _, e := range page {
				w := want[seen]
				if e.UserID != w.UserID || e.Score != w.Score || e.Rank != int64(seen+1) || !e.UpdatedAt.Equal(w.UpdatedAt) {
					t.Fatalf("rank %d: got %s %d (rank %d), want %s %d", seen+1, e.UserID, e.Score, e.Rank, w.UserID, w.Score)
				}
				seen++
			}
			after = &page[len(page)-1].Position
		}
		if seen != len(want) {
			t.Fatalf("paged %d entries, want %d", seen, len(want))
		}
		for _, i := range []int{0, 1, len(want) / 2, len(want) - 1} {
			if e := f.user(want[i].UserID); e.Rank != int64(i+1) || e.Score != want[i].Score {
				t.Errorf("User(%s) = rank %d score %d, want %d %d", want[i].UserID, e.Rank, e.Score, i+1, want[i].Score)
			}
			me, around, err := f.boards.Around(ctx, "global", "all_time", want[i].UserID, 2)
			if err != nil || me.Rank != int64(i+1) || len(around) == 0 {
				t.Errorf("Around(%s) = %+v, %d entries, %v", want[i].UserID, me, len(around), err)
			}
		}
		stored, zcard, err := f.boards.Stored(ctx, "global", "all_time")
		if err != nil || len(stored) != len(want) || zcard != int64(len(want)) {
			t.Fatalf("Stored: %d entries, ZCARD %d, %v; want %d", len(stored), zcard, err, len(want))
		}
		// ReadValues finds each user's bucket in Go, as the scripts do in Lua.
		keys := make([]storage.ValueKey, 0, len(states))
		for _, s := range states {
			keys = append(keys, storage.ValueKey{Board: "global", Period: "all_time", UserID: s.UserID})
		}
		values, err := f.boards.ReadValues(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		present := map[string]int64{}
		for _, w := range want {
			present[w.UserID] = w.Score
		}
		for i, v := range values {
			if w, ok := present[keys[i].UserID]; v.OK != ok || v.Score != w {
				t.Fatalf("ReadValues(%s) = %+v, want %d (present %v)", keys[i].UserID, v, w, ok)
			}
		}
	}
	checkRanks(want)
	if top := f.top(10); top.Entries[0].UserID != want[0].UserID || top.Entries[9].UserID != want[9].UserID {
		t.Errorf("top = %s .. %s, want %s .. %s", top.Entries[0].UserID, top.Entries[9].UserID, want[0].UserID, want[9].UserID)
	}

	// Most entries leave (removed by an admin): the rest keep their ranks, the removed are
	// gone from every read.
	var removed []storage.EntryState
	var kept []storage.EntryState
	for i, s := range want {
		if i%30 == 0 {
			kept = append(kept, s)
			continue
		}
		s.Version, s.Removed = 2, true
		removed = append(removed, s)
	}
	for start := 0; start < len(removed); start += 500 {
		f.apply(nil, removed[start:min(start+500, len(removed))]...)
	}
	checkRanks(kept)
	if got, err := f.boards.Users(ctx, "global", "all_time", []string{removed[0].UserID, kept[1].UserID}); err != nil || len(got) != 1 || got[0].UserID != kept[1].UserID || got[0].Rank != 2 {
		t.Errorf("Users(removed, kept) = %+v, %v", got, err)
	}
}

// TestEntryHashesExpireTogether: on a board whose keys expire, every bucket and the sorted
// set, nick names and metadata live until one deadline, and the top (whose presence marks
// the board loaded) goes before it, whether or not a write touches them; a write refreshes
// them all once half the lifetime they were given is gone.
func TestEntryHashesExpireTogether(t *testing.T) {
	t.Parallel()
	f := newBoardsFixture(t, 10)
	ctx := testContext(t)
	m := storage.Target{Board: "match:big", Period: "all_time", TTL: time.Hour}
	if _, err := f.boards.Load(ctx, m, noPages); err != nil {
		t.Fatal(err)
	}
	states := bigStates(1000, 1)
	for i := range states {
		states[i].Board = m.Board
	}
	for start := 0; start < len(states); start += 250 {
		if _, _, err := f.boards.Apply(ctx, m, states[start:start+250], nil); err != nil {
			t.Fatal(err)
		}
	}
	base := f.prefix + ":{match:big}:all_time:"
	buckets := append(f.bucketKeys(m.Board, m.Period), base+"u")
	if len(buckets) < 10 {
		t.Fatalf("1000 entries in %d buckets", len(buckets))
	}
	lives := func() (minimum, maximum time.Duration) {
		minimum = 2 * time.Hour
		for _, k := range buckets {
			ttl := f.rdb.PTTL(ctx, k).Val()
			minimum, maximum = min(minimum, ttl), max(maximum, ttl)
		}
		return minimum, maximum
	}
	lo, hi := lives()
	if lo <= 59*time.Minute || hi > time.Hour {
		t.Fatalf("buckets live %v to %v, want about an hour", lo, hi)
	}
	if top := f.rdb.PTTL(ctx, base+"top").Val(); top >= lo || top <= 0 {
		t.Errorf("the top lives %v; the buckets at least %v", top, lo)
	}

	// As if every key had last been given its lifetime 20 minutes ago: a write to one user
	// leaves the deadline as it is, for the bucket it writes and the sorted set too (a sorted
	// set that outlived the buckets would keep members no record names).
	age := func(left time.Duration) {
		t.Helper()
		st := strings.Split(f.rdb.HGet(ctx, base+"u", "").Val(), "|") // level|split|deadline ms
		if len(st) != 3 {
			t.Fatalf("bucket state %v", st)
		}
		deadline := time.Now().Add(left).UnixMilli()
		f.rdb.HSet(ctx, base+"u", "", st[0]+"|"+st[1]+"|"+strconv.FormatInt(deadline, 10))
		for _, k := range append(buckets, base+"z", base+"n", base+"m") {
			f.rdb.PExpire(ctx, k, left)
		}
	}
	write := func(version int64) {
		t.Helper()
		s := states[0]
		s.Version, s.Score, s.SortKey = version, s.Score+1, s.SortKey+1
		if _, _, err := f.boards.Apply(ctx, m, []storage.EntryState{s}, nil); err != nil {
			t.Fatal(err)
		}
	}
	age(40 * time.Minute)
	write(2)
	if lo, hi := lives(); lo <= 39*time.Minute || hi > 40*time.Minute {
		t.Errorf("after a write, buckets live %v to %v: want all of them 40 min, the written one too", lo, hi)
	}
	for _, k := range []string{"z", "n", "m"} {
		if ttl := f.rdb.PTTL(ctx, base+k).Val(); ttl > 40*time.Minute || (ttl <= 39*time.Minute && ttl != -2*time.Nanosecond) {
			t.Errorf("after a write, %s lives %v: want the buckets' 40 min", k, ttl)
		}
	}
	if top, lo := f.rdb.PTTL(ctx, base+"top").Val(), 39*time.Minute; top > 40*time.Minute-time.Second || top < lo {
		t.Errorf("the top lives %v; the oldest bucket 40 min", top)
	}

	// 25 minutes left of the hour: less than half. A write refreshes every bucket.
	age(25 * time.Minute)
	write(3)
	if lo, hi := lives(); lo <= 59*time.Minute || hi > time.Hour {
		t.Errorf("after a refreshing write, buckets live %v to %v, want about an hour", lo, hi)
	}
	if top := f.rdb.PTTL(ctx, base+"top").Val(); top <= 58*time.Minute || top >= time.Hour {
		t.Errorf("after a refreshing write the top lives %v", top)
	}
}
