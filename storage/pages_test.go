package storage_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openleaderboard/leaderboard/storage"
)

// newICUMigratedPool is newMigratedPool on a database whose collation does not order text
// byte by byte (see storagetest.NewICUDatabase).
func newICUMigratedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	rawURL, ok := servers.NewICUDatabase(t)
	if !ok {
		t.Skip("this PostgreSQL has no ICU collations")
	}
	pool, err := pgxpool.New(testContext(t), rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := storage.Migrate(testContext(t), pool, storage.NewOutboxSchema(), 1); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool
}

// walk follows pages of size from the top to the end, returning "rank:user" of each entry.
func walk(t *testing.T, page func(after *storage.Position) ([]storage.Entry, error), size int) []string {
	t.Helper()
	var out []string
	var after *storage.Position
	for range 1000 {
		es, err := page(after)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			out = append(out, fmt.Sprintf("%d:%s", e.Rank, e.UserID))
		}
		if len(es) < size {
			return out
		}
		after = &es[len(es)-1].Position
	}
	t.Fatal("the walk does not end")
	return nil
}

func rankedUsers(es []storage.Entry) string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%d:%s", e.Rank, e.UserID))
	}
	return strings.Join(out, " ")
}

// TestPagesAgreeWithPostgres: pages, around-me and friends read from Redis and from
// PostgreSQL (the degraded path) give every entry the same rank, also for entries tied
// on value and reach time whose user ids a locale collation orders differently from
// bytes ("B" and "a", "a-1" and "a1").
func TestPagesAgreeWithPostgres(t *testing.T) {
	t.Parallel()
	pool := newICUMigratedPool(t)
	rdb, prefix := newTestRedis(t)
	ctx := testContext(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO board_entries (board_id, period, user_id, score, sort_key, version, reached_at, updated_at)
		SELECT 'global', 'all_time', (ARRAY['a', 'B', 'a-', 'A_', 'b.', ':z', 'a1', 'Ab'])[1 + i % 8] || '.' || (i / 8)::text,
		       i % 5, i % 5, 1, timestamp '2026-01-01' + (i % 3) * interval '1 s', now()
		FROM generate_series(0, 239) i`); err != nil {
		t.Fatal(err)
	}
	boards, ranks := storage.NewBoards(rdb, prefix, 100), storage.NewRanks(pool)
	if _, err := boards.Reload(ctx, ranks, global); err != nil {
		t.Fatal(err)
	}
	const size = 17
	fromRedis := walk(t, func(after *storage.Position) ([]storage.Entry, error) {
		return boards.Page(ctx, "global", "all_time", after, size)
	}, size)
	fromPG := walk(t, func(after *storage.Position) ([]storage.Entry, error) {
		return ranks.Page(ctx, "global", "all_time", after, size)
	}, size)
	if len(fromRedis) != 240 {
		t.Fatalf("the Redis walk lists %d entries, want 240", len(fromRedis))
	}
	if strings.Join(fromRedis, " ") != strings.Join(fromPG, " ") {
		for i := range fromRedis {
			if i >= len(fromPG) || fromRedis[i] != fromPG[i] {
				t.Fatalf("walks differ at %d: redis %s, postgres %v", i, fromRedis[i], fromPG[i:min(i+3, len(fromPG))])
			}
		}
	}
	for i, want := range fromRedis {
		if want != fmt.Sprintf("%d:%s", i+1, strings.SplitN(want, ":", 2)[1]) {
			t.Fatalf("entry %d is %s: ranks are not consecutive", i, want)
		}
	}
	top, err := boards.Top(ctx, "global", "all_time", 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := rankedUsers(top.Entries); got != strings.Join(fromRedis[:100], " ") {
		t.Fatalf("top and pages disagree:\n top %s\npage %s", got, strings.Join(fromRedis[:100], " "))
	}

	for _, at := range []int{0, 1, 120, 238, 239} { // top, middle, bottom
		user := strings.SplitN(fromRedis[at], ":", 2)[1]
		meR, aroundR, err := boards.Around(ctx, "global", "all_time", user, 3)
		if err != nil {
			t.Fatal(err)
		}
		meP, aroundP, err := ranks.Around(ctx, "global", "all_time", user, 3)
		if err != nil {
			t.Fatal(err)
		}
		want := strings.Join(fromRedis[max(0, at-3):min(240, at+4)], " ")
		if meR.Rank != int64(at+1) || meP.Rank != int64(at+1) || rankedUsers(aroundR) != want || rankedUsers(aroundP) != want {
			t.Errorf("around %s (rank %d): redis %d [%s], postgres %d [%s], want [%s]", user, at+1, meR.Rank, rankedUsers(aroundR), meP.Rank, rankedUsers(aroundP), want)
		}
	}
	var ids []string
	var want []string
	for _, at := range []int{3, 50, 51, 200, 239} {
		want = append(want, fromRedis[at])
		ids = append(ids, strings.SplitN(fromRedis[at], ":", 2)[1])
	}
	ids = append([]string{"nobody"}, ids...)
	ids[1], ids[4] = ids[4], ids[1] // not in rank order
	usersR, err := boards.Users(ctx, "global", "all_time", ids)
	if err != nil {
		t.Fatal(err)
	}
	usersP, err := ranks.Users(ctx, "global", "all_time", ids)
	if err != nil {
		t.Fatal(err)
	}
	if rankedUsers(usersR) != strings.Join(want, " ") || rankedUsers(usersP) != strings.Join(want, " ") {
		t.Errorf("users: redis [%s], postgres [%s], want [%s]", rankedUsers(usersR), rankedUsers(usersP), strings.Join(want, " "))
	}
}
