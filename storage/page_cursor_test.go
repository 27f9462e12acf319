package storage_test

import (
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestPageAfterTheCursorsEntryChanged: the entry a cursor ends on changes between two
// pages (a new best with a new reach time, a lower value with the same reach time, a
// removal, or nothing); the entries below the cursor did not move, so the next page starts
// right after the cursor's position with them, in Redis as in PostgreSQL. (Redis skipped
// one when the cursor's entry had moved below its position or was gone.)
func TestPageAfterTheCursorsEntryChanged(t *testing.T) {
	t.Parallel()
	reached := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	later := reached.Add(time.Minute)
	u03 := func(score int64, at time.Time, removed bool) storage.EntryState {
		return storage.EntryState{Board: "global", Period: "all_time", UserID: "u03", Score: score, SortKey: score, Version: 2, ReachedAt: at, UpdatedAt: later, Removed: removed}
	}
	for name, c := range map[string]struct {
		change storage.EntryState
		sql    string
		want   string
	}{
		"a new best":           {u03(1000, later, false), `UPDATE board_entries SET score = 1000, sort_key = 1000, version = 2, reached_at = $1 WHERE user_id = 'u03'`, "4:u04 5:u05 6:u06"},
		"lowered, same reach":  {u03(5, reached, false), `UPDATE board_entries SET score = 5, sort_key = 5, version = 2 WHERE user_id = 'u03' AND $1::timestamptz IS NOT NULL`, "3:u04 4:u05 5:u06"},
		"removed":              {u03(80, reached, true), `DELETE FROM board_entries WHERE user_id = 'u03' AND $1::timestamptz IS NOT NULL`, "3:u04 4:u05 5:u06"},
		"unchanged (a rename)": {u03(80, reached, false), `SELECT $1::timestamptz`, "4:u04 5:u05 6:u06"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := newMigratedPool(t, 1)
			rdb, prefix := newTestRedis(t)
			ctx := testContext(t)
			// u01..u10 with scores 100, 90, ..., 10: one rank each.
			if _, err := pool.Exec(ctx, `
				INSERT INTO board_entries (board_id, period, user_id, score, sort_key, version, reached_at, updated_at)
				SELECT 'global', 'all_time', 'u' || lpad(i::text, 2, '0'), 110 - 10 * i, 110 - 10 * i, 1, $1, $1
				FROM generate_series(1, 10) i`, reached); err != nil {
				t.Fatal(err)
			}
			boards, ranks := storage.NewBoards(rdb, prefix, 100), storage.NewRanks(pool)
			if _, err := boards.Reload(ctx, ranks, global); err != nil {
				t.Fatal(err)
			}
			first, err := boards.Page(ctx, "global", "all_time", nil, 3)
			if err != nil || len(first) != 3 || first[2].UserID != "u03" {
				t.Fatalf("first page %v %v", first, err)
			}
			cursor := first[2].Position
			if _, err := pool.Exec(ctx, c.sql, later); err != nil {
				t.Fatal(err)
			}
			if _, _, err := boards.Apply(ctx, global, []storage.EntryState{c.change}, map[string]string{"u03": "Renamed"}); err != nil {
				t.Fatal(err)
			}
			fromRedis, err := boards.Page(ctx, "global", "all_time", &cursor, 3)
			if err != nil {
				t.Fatal(err)
			}
			fromPG, err := ranks.Page(ctx, "global", "all_time", &cursor, 3)
			if err != nil {
				t.Fatal(err)
			}
			if rankedUsers(fromRedis) != c.want || rankedUsers(fromPG) != c.want {
				t.Fatalf("page after the cursor: redis [%s] postgres [%s], want [%s] from both", rankedUsers(fromRedis), rankedUsers(fromPG), c.want)
			}
		})
	}
}
