package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// bigReport is the bulk-seeded board of the bigreads phase: how it was loaded and what it
// costs in Redis.
type bigReport struct {
	Board   string `json:"board"`
	Entries int64  `json:"entries"`
	// InsertS is the one INSERT ... SELECT FROM generate_series into board_entries, AnalyzeS
	// the ANALYZE after it (a bulk load leaves the planner's statistics stale); SeedS both.
	InsertS  float64 `json:"seed_insert_s"`
	AnalyzeS float64 `json:"seed_analyze_s"`
	SeedS    float64 `json:"seed_s"`
	// RebuildS is POST /admin/boards/{board}/rebuild as the loadgen timed it (PostgreSQL ->
	// Redis); RebuildTookMs and RebuildEntries are what the service answered.
	RebuildS       float64 `json:"rebuild_s"`
	RebuildTookMs  int64   `json:"rebuild_took_ms"`
	RebuildEntries int64   `json:"rebuild_entries"`
	// Redis memory (MEMORY USAGE ... SAMPLES 0) of the board's keys, by key suffix.
	RedisBytes    map[string]int64 `json:"redis_bytes"`
	RedisTotal    int64            `json:"redis_bytes_total"`
	ZCard         int64            `json:"zcard"`
	BytesPerEntry float64          `json:"redis_bytes_per_entry"`
	Error         string           `json:"error,omitempty"`
}

// matchMemory is the Redis memory of one match board after the mixed phase.
type matchMemory struct {
	MatchID       string           `json:"match_id"`
	Players       int64            `json:"players"` // entries (ZCARD)
	MatchSize     int              `json:"match_size"`
	RedisBytes    map[string]int64 `json:"redis_bytes"`
	RedisTotal    int64            `json:"redis_bytes_total"`
	BytesPerEntry float64          `json:"redis_bytes_per_entry"`
}

// redisSuffixes are a board period's keys (storage/redis.go); "ver" is the board's.
var redisSuffixes = []string{"z", "u", "n", "m", "top", "ver"}

// boardMemory sums MEMORY USAGE key SAMPLES 0 (exact: every element counted) over a board
// period's keys; absent keys count 0; "u" counts every bucket of the entry hashes (u and
// u:i, found with SCAN). It returns the bytes by suffix, the total and ZCARD.
func (b *bench) boardMemory(ctx context.Context, board, period string) (map[string]int64, int64, int64, error) {
	out := map[string]int64{}
	var total int64
	for _, s := range redisSuffixes {
		key := redisKey(b.cfg.Prefix, board, period, s)
		if s == "ver" {
			key = redisVersionKey(b.cfg.Prefix, board)
		}
		n, err := b.rdb.MemoryUsage(ctx, key, 0).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, 0, 0, fmt.Errorf("redis MEMORY USAGE %s: %w", key, err)
		}
		out[s] = n
		total += n
	}
	iter := b.rdb.Scan(ctx, 0, redisKey(b.cfg.Prefix, board, period, "u:*"), 1000).Iterator()
	for iter.Next(ctx) {
		n, err := b.rdb.MemoryUsage(ctx, iter.Val(), 0).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, 0, 0, fmt.Errorf("redis MEMORY USAGE %s: %w", iter.Val(), err)
		}
		out["u"] += n
		total += n
	}
	if err := iter.Err(); err != nil {
		return nil, 0, 0, fmt.Errorf("redis SCAN: %w", err)
	}
	zcard, err := b.rdb.ZCard(ctx, redisKey(b.cfg.Prefix, board, period, "z")).Result()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("redis ZCARD: %w", err)
	}
	return out, total, zcard, nil
}

// measureMatchMemory reports the Redis memory of the match with the most players that got
// points.
func (b *bench) measureMatchMemory(ctx context.Context) *matchMemory {
	counts := make([]int64, len(b.matches.ids))
	for u, s := range b.users.sum[kindMatch] {
		if s > 0 {
			counts[b.matches.of(int32(u))]++
		}
	}
	best := 0
	for i, n := range counts {
		if n > counts[best] {
			best = i
		}
	}
	if len(counts) == 0 || counts[best] == 0 {
		return nil
	}
	id := b.matches.ids[best]
	bytes, total, zcard, err := b.boardMemory(ctx, matchBoard(id), allTime)
	if err != nil {
		fmt.Fprintf(b.out, "  match memory: %v\n", err)
		return nil
	}
	m := &matchMemory{MatchID: id, Players: zcard, MatchSize: b.cfg.MatchSize, RedisBytes: bytes, RedisTotal: total}
	if zcard > 0 {
		m.BytesPerEntry = float64(int64(float64(total)/float64(zcard)*10)) / 10
	}
	fmt.Fprintf(b.out, "  Redis memory of match %s (%d players): %d bytes, %.1f per entry (%s)\n", id, zcard, total, m.BytesPerEntry, fmtBytes(bytes))
	return m
}

// bigReads seeds the big board in PostgreSQL with one INSERT ... SELECT FROM
// generate_series, loads it into Redis with the admin rebuild, measures its Redis memory,
// then runs closed-loop reads of it: a user's rank, a user's rank with 5 neighbours on
// each side, page walks and the top 10.
func (b *bench) bigReads(ctx context.Context) (*bigReport, []*readPhase) {
	r := &bigReport{Board: b.cfg.BigBoard, Entries: int64(b.cfg.BigEntries)}
	if err := b.seedBig(ctx, r); err != nil {
		r.Error = err.Error()
		fmt.Fprintf(b.out, "  bigreads: %v\n", err)
		return r, nil
	}
	board := url.PathEscape(b.cfg.BigBoard)
	width := max(7, len(strconv.Itoa(b.cfg.BigEntries)))
	randomUser := func() string {
		return fmt.Sprintf("big-%0*d", width, 1+rand.IntN(b.cfg.BigEntries))
	}
	var out []*readPhase
	run := func(name string, newReader func(*readPhase) reader) {
		if ctx.Err() != nil {
			return
		}
		ph := b.runReads(ctx, name, newReader)
		b.printRead(ph)
		out = append(out, ph)
	}
	run("big: own rank", func(*readPhase) reader {
		return statelessReader(func() string { return "/v1/boards/" + board + "/users/" + randomUser() })
	})
	run("big: around 5", func(*readPhase) reader {
		return statelessReader(func() string { return "/v1/boards/" + board + "/users/" + randomUser() + "?around=5" })
	})
	run("big: page walk", func(ph *readPhase) reader {
		return &pageWalker{ph: ph, base: "/v1/boards/" + board + "/entries?size=100"}
	})
	run("big: top-10", func(*readPhase) reader {
		return statelessReader(func() string { return "/v1/boards/" + board + "/top?limit=10" })
	})
	return r, out
}

// pageWalker reads a board page after page, following next_cursor from the first page;
// at the last page it starts over. A failed read is retried with the same cursor.
type pageWalker struct {
	ph      *readPhase
	base    string
	path    string
	depth   int64 // pages past the first of the current walk
	started bool
}

func (w *pageWalker) next(prev []byte) string {
	if !w.started || prev == nil {
		if !w.started {
			w.started, w.path = true, w.base
		}
		return w.path
	}
	var page struct {
		NextCursor *string `json:"next_cursor"`
	}
	if err := json.Unmarshal(prev, &page); err != nil || page.NextCursor == nil || *page.NextCursor == "" {
		if err == nil {
			w.ph.restarts.Add(1)
		}
		w.depth, w.path = 0, w.base
		return w.path
	}
	w.depth++
	w.ph.pagesDeep.Add(1)
	for {
		m := w.ph.maxDepth.Load()
		if w.depth <= m || w.ph.maxDepth.CompareAndSwap(m, w.depth) {
			break
		}
	}
	w.path = w.base + "&cursor=" + url.QueryEscape(*page.NextCursor)
	return w.path
}

// seedBig checks the service serves the big board, seeds it in PostgreSQL, rebuilds it into
// Redis and measures its memory.
func (b *bench) seedBig(ctx context.Context, r *bigReport) error {
	ans, err := b.api.do(ctx, http.MethodGet, "/v1/boards", nil)
	if err != nil || ans.status != http.StatusOK {
		key, sample := errorKey(ans, err)
		return fmt.Errorf("GET /v1/boards: %s %s", key, sample)
	}
	var list struct {
		Boards []struct {
			ID       string `json:"id"`
			Operator string `json:"operator"`
			Order    string `json:"order"`
			Period   string `json:"period"`
		} `json:"boards"`
	}
	if err := json.Unmarshal(ans.body, &list); err != nil {
		return fmt.Errorf("GET /v1/boards: %w", err)
	}
	found := false
	for _, bd := range list.Boards {
		if bd.ID == b.cfg.BigBoard {
			found = true
			if bd.Operator != "best" || bd.Order != "desc" || bd.Period != allTime {
				return fmt.Errorf("board %s is %s/%s/%s; want best/desc/all_time", bd.ID, bd.Operator, bd.Order, bd.Period)
			}
		}
	}
	if !found {
		return fmt.Errorf("the service has no board %q: start it with LEADERBOARD_BOARDS_FILE naming one (operator best, period all_time), as scripts/bench.sh does", b.cfg.BigBoard)
	}

	// The bulk path: one INSERT ... SELECT FROM generate_series. Scores take entries/20
	// distinct values (about 20 entries per value: many ties), in a scrambled order
	// (multiplicative hash modulo a prime); reached_at is distinct per entry (1 ms apart),
	// so ties rank by it. sort_key = score (a desc board). Then ANALYZE, which a bulk
	// load needs for the planner to know the table grew (the rebuild pages by user id).
	fmt.Fprintf(b.out, "  seeding %d entries into board_entries (INSERT ... SELECT FROM generate_series)...\n", b.cfg.BigEntries)
	width := max(7, len(strconv.Itoa(b.cfg.BigEntries)))
	t0 := time.Now()
	if _, err := b.pg.Exec(ctx, `DELETE FROM board_entries WHERE board_id = $1`, b.cfg.BigBoard); err != nil {
		return fmt.Errorf("seed: delete: %w", err)
	}
	tag, err := b.pg.Exec(ctx, `
		INSERT INTO board_entries (board_id, period, user_id, score, sort_key, version, reached_at, updated_at)
		SELECT $1, 'all_time', 'big-' || lpad(i::text, $3::int, '0'), s.v, s.v, 1, t.at, t.at
		FROM generate_series(1, $2::int) AS i,
			LATERAL (SELECT ((i::bigint * 2654435761) % 1000003) % greatest($2::bigint / 20, 1) AS v) AS s,
			LATERAL (SELECT timestamptz '2025-01-01 00:00:00+00' + i * interval '1 millisecond' AS at) AS t`,
		b.cfg.BigBoard, b.cfg.BigEntries, width)
	if err != nil {
		return fmt.Errorf("seed: insert: %w", err)
	}
	r.InsertS = seconds(time.Since(t0))
	t1 := time.Now()
	if _, err := b.pg.Exec(ctx, `ANALYZE board_entries`); err != nil {
		return fmt.Errorf("seed: analyze: %w", err)
	}
	r.AnalyzeS = seconds(time.Since(t1))
	r.SeedS = seconds(time.Since(t0))
	fmt.Fprintf(b.out, "  seeded %d rows in %.1fs (insert %.1fs, analyze %.1fs)\n", tag.RowsAffected(), r.SeedS, r.InsertS, r.AnalyzeS)

	fmt.Fprintf(b.out, "  POST /admin/boards/%s/rebuild (PostgreSQL -> Redis)...\n", b.cfg.BigBoard)
	rctx, cancel := context.WithTimeout(ctx, b.cfg.DrainTimeout)
	defer cancel()
	t2 := time.Now()
	ans, err = b.api.admin(rctx, http.MethodPost, "/admin/boards/"+url.PathEscape(b.cfg.BigBoard)+"/rebuild", nil)
	r.RebuildS = seconds(time.Since(t2))
	if err != nil || ans.status != http.StatusOK {
		key, sample := errorKey(ans, err)
		return fmt.Errorf("rebuild: %s %s", key, sample)
	}
	var rb struct {
		Entries int64 `json:"entries"`
		TookMs  int64 `json:"took_ms"`
	}
	if err := json.Unmarshal(ans.body, &rb); err != nil {
		return fmt.Errorf("rebuild answer: %w", err)
	}
	r.RebuildEntries, r.RebuildTookMs = rb.Entries, rb.TookMs
	fmt.Fprintf(b.out, "  rebuilt %d entries in %.1fs (the service says %d ms)\n", rb.Entries, r.RebuildS, rb.TookMs)

	bytes, total, zcard, err := b.boardMemory(ctx, b.cfg.BigBoard, allTime)
	if err != nil {
		return err
	}
	r.RedisBytes, r.RedisTotal, r.ZCard = bytes, total, zcard
	if zcard > 0 {
		r.BytesPerEntry = float64(int64(float64(total)/float64(zcard)*10)) / 10
	}
	fmt.Fprintf(b.out, "  Redis memory: %d bytes for %d entries, %.1f bytes per entry (%s)\n", total, zcard, r.BytesPerEntry, fmtBytes(bytes))
	return nil
}
