package storage_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/openleaderboard/leaderboard/storage"
)

func rankedText(es []storage.Entry) string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%d|%s|%d", e.Rank, e.UserID, e.Score))
	}
	return strings.Join(out, " ")
}

// TestReadersAgreeOnAnAscBoardWithNegativeValuesAndTies: an asc board (sort key = -value) with negative
// values, values at ±(2^53-1), many ties on value and reach time, and hidden entries,
// read from Redis, PostgreSQL (sorted) and PostgreSQL frozen (closed periods): every read
// gives every entry the same rank and score. (Fails when one reader breaks ties
// in another order.)
func TestReadersAgreeOnAnAscBoardWithNegativeValuesAndTies(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	rdb, prefix := newTestRedis(t)
	ctx := testContext(t)
	const max53 = int64(1<<53 - 1)
	if _, err := pool.Exec(ctx, `
		INSERT INTO board_entries (board_id, period, user_id, score, sort_key, version, reached_at, updated_at, hidden)
		SELECT 'lap', '2026-W01', 'u' || (i * 7919 % 211)::text || (ARRAY['a', 'B', '-', '_', '.', ':', '0'])[1 + i % 7],
		       v, -v, 1, timestamp '2026-01-01' + (i % 3) * interval '1 microsecond', timestamp '2026-01-02', i % 11 = 0
		FROM generate_series(0, 299) i,
		LATERAL (SELECT (ARRAY[$1::bigint, -$1::bigint, 0, -1, 1, 5, -5, $1 - 1, -$1 + 1])[1 + i % 9] AS v) x`, max53); err != nil {
		t.Fatal(err)
	}
	var visible int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM visible_entries WHERE board_id = 'lap'`).Scan(&visible); err != nil {
		t.Fatal(err)
	}
	target := storage.Target{Board: "lap", Period: "2026-W01"}
	boards, ranks := storage.NewBoards(rdb, prefix, 100), storage.NewRanks(pool)
	if _, err := boards.Reload(ctx, ranks, target); err != nil {
		t.Fatal(err)
	}
	if _, err := ranks.Freeze(ctx, "lap", "2026-W01"); err != nil {
		t.Fatal(err)
	}
	closed := storage.NewRanks(pool).Closed()
	walkAll := func(page func(after *storage.Position) ([]storage.Entry, error), size int) string {
		var out []storage.Entry
		var after *storage.Position
		for range 1000 {
			es, err := page(after)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, es...)
			if len(es) < size {
				return rankedText(out)
			}
			after = &es[len(es)-1].Position
		}
		t.Fatal("no end")
		return ""
	}
	rWalk := walkAll(func(a *storage.Position) ([]storage.Entry, error) { return boards.Page(ctx, "lap", "2026-W01", a, 13) }, 13)
	pWalk := walkAll(func(a *storage.Position) ([]storage.Entry, error) { return ranks.Page(ctx, "lap", "2026-W01", a, 13) }, 13)
	cWalk := walkAll(func(a *storage.Position) ([]storage.Entry, error) { return closed.Page(ctx, "lap", "2026-W01", a, 13) }, 13)
	if rWalk != pWalk || rWalk != cWalk {
		t.Fatalf("walks differ:\nredis  %s\npg     %s\nclosed %s", rWalk, pWalk, cWalk)
	}
	all := strings.Split(rWalk, " ")
	if len(all) != visible {
		t.Fatalf("walk lists %d, want %d", len(all), visible)
	}
	// lowest value first on an asc board
	if !strings.HasSuffix(all[0], fmt.Sprintf("|%d", -max53)) {
		t.Fatalf("first entry %s, want value %d", all[0], -max53)
	}
	rTop, err := boards.Top(ctx, "lap", "2026-W01", 100)
	if err != nil {
		t.Fatal(err)
	}
	pTop, err := ranks.Top(ctx, "lap", "2026-W01", 100)
	if err != nil {
		t.Fatal(err)
	}
	cTop, err := closed.Top(ctx, "lap", "2026-W01", 100)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(all[:100], " ")
	if rankedText(rTop.Entries) != want || rankedText(pTop.Entries) != want || rankedText(cTop.Entries) != want {
		t.Fatalf("tops differ from the walk:\nwant   %s\nredis  %s\npg     %s\nclosed %s", want, rankedText(rTop.Entries), rankedText(pTop.Entries), rankedText(cTop.Entries))
	}
	for at := range all {
		user := strings.Split(all[at], "|")[1]
		ru, err := boards.User(ctx, "lap", "2026-W01", user)
		if err != nil {
			t.Fatal(err)
		}
		pu, err := ranks.User(ctx, "lap", "2026-W01", user)
		if err != nil {
			t.Fatal(err)
		}
		cu, err := closed.User(ctx, "lap", "2026-W01", user)
		if err != nil {
			t.Fatal(err)
		}
		w := all[at]
		for n, got := range map[string]storage.Entry{"redis": ru, "pg": pu, "closed": cu} {
			if s := fmt.Sprintf("%d|%s|%d", got.Rank, got.UserID, got.Score); s != w {
				t.Errorf("user %s from %s: %s, want %s", user, n, s, w)
			}
		}
		if at%17 != 0 && at != len(all)-1 && at != 1 {
			continue
		}
		wantAround := strings.Join(all[max(0, at-3):min(len(all), at+4)], " ")
		_, ra, err := boards.Around(ctx, "lap", "2026-W01", user, 3)
		if err != nil {
			t.Fatal(err)
		}
		_, pa, err := ranks.Around(ctx, "lap", "2026-W01", user, 3)
		if err != nil {
			t.Fatal(err)
		}
		_, ca, err := closed.Around(ctx, "lap", "2026-W01", user, 3)
		if err != nil {
			t.Fatal(err)
		}
		if rankedText(ra) != wantAround || rankedText(pa) != wantAround || rankedText(ca) != wantAround {
			t.Errorf("around %s:\nwant   %s\nredis  %s\npg     %s\nclosed %s", user, wantAround, rankedText(ra), rankedText(pa), rankedText(ca))
		}
	}
	// hidden users: 404 everywhere
	var hidden string
	if err := pool.QueryRow(ctx, `SELECT user_id FROM board_entries WHERE board_id = 'lap' AND hidden LIMIT 1`).Scan(&hidden); err != nil {
		t.Fatal(err)
	}
	if _, err := boards.User(ctx, "lap", "2026-W01", hidden); err == nil {
		t.Errorf("hidden user %s read from Redis", hidden)
	}
	if _, err := closed.User(ctx, "lap", "2026-W01", hidden); err == nil {
		t.Errorf("hidden user %s read from closed", hidden)
	}
}
