package main

import (
	"cmp"
	"context"
	"fmt"
	"github.com/openleaderboard/leaderboard/storage"
	"slices"
	"strings"
	"time"
)

// checkReport is the result of the exactly-once check.
type checkReport struct {
	Pass        bool    `json:"pass"`
	Drained     bool    `json:"drained"`
	DrainWaitS  float64 `json:"drain_wait_s"`
	Accepted    int64   `json:"accepted_202"`
	Ambiguous   int64   `json:"ambiguous_sent"` // 5xx or no answer: allowed at most once
	HistoryRows int64   `json:"score_history_rows"`
	// WantRows is how many score_history rows the 202s must leave (3 per match point).
	WantRows int64 `json:"score_history_rows_wanted"`
	// AcceptedByKind counts the 202s by kind (best, incr, match).
	AcceptedByKind map[string]int64 `json:"accepted_by_kind"`

	Missing          int64 `json:"missing"`           // a 202 event without every row it must leave
	Duplicated       int64 `json:"duplicated"`        // an event with a board's row more than once
	Extra            int64 `json:"extra"`             // a row whose event id was not accepted (nor ambiguous)
	WrongRows        int64 `json:"wrong_rows"`        // a row whose board, period, user or value differ from what was sent
	Partial          int64 `json:"ambiguous_partial"` // an ambiguous match point applied to some of its boards only
	AmbiguousApplied int64 `json:"ambiguous_applied"` // ambiguous sends found once in score_history (not a failure)
	RequestsMissing  int64 `json:"score_requests_missing"`
	// LostUnchanged counts best scores answered 200 "unchanged": every one the bench sends
	// beats all the user sent before (users.next), so the service dropped it.
	LostUnchanged int64 `json:"lost_unchanged"`

	Users          int64 `json:"users"` // entries expected on global
	Entries        int64 `json:"entries"`
	PGWrong        int64 `json:"board_entries_wrong"`
	PGMissing      int64 `json:"board_entries_missing"`
	PGExtra        int64 `json:"board_entries_extra"`
	RedisWrong     int64 `json:"redis_hash_wrong"`
	RedisMissing   int64 `json:"redis_hash_missing"`
	RedisExtra     int64 `json:"redis_hash_extra"`
	RedisZSetWrong int64 `json:"redis_zset_wrong"`
	RedisZCard     int64 `json:"redis_zcard"` // of global
	// Boards breaks the entry checks down by board (every match:{id} board counts as match).
	Boards      map[string]*boardCheck `json:"boards"`
	DeadLetters int64                  `json:"dead_letters"`
	Examples    []string               `json:"examples,omitempty"`
	Error       string                 `json:"error,omitempty"`
}

// boardCheck is the entry check of one board (or of every match board together).
type boardCheck struct {
	Periods        int   `json:"periods"` // board periods checked (match: one per match)
	Entries        int64 `json:"entries"` // expected entries
	PGWrong        int64 `json:"board_entries_wrong"`
	PGMissing      int64 `json:"board_entries_missing"`
	PGExtra        int64 `json:"board_entries_extra"`
	RedisWrong     int64 `json:"redis_hash_wrong"`
	RedisMissing   int64 `json:"redis_hash_missing"`
	RedisExtra     int64 `json:"redis_hash_extra"`
	RedisZSetWrong int64 `json:"redis_zset_wrong"`
}

func (r *checkReport) example(format string, args ...any) {
	if len(r.Examples) < 20 {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

func (r *checkReport) failures() int64 {
	return r.Missing + r.Duplicated + r.Extra + r.WrongRows + r.Partial + r.RequestsMissing + r.LostUnchanged +
		r.PGWrong + r.PGMissing + r.PGExtra + r.RedisWrong + r.RedisMissing + r.RedisExtra + r.RedisZSetWrong
}

// boardClass is the name a board's figures are reported under: its id, or "match" for
// every match:{id} board.
func boardClass(board string) string {
	if strings.HasPrefix(board, "match:") {
		return "match"
	}
	return board
}

func (r *checkReport) board(board string) *boardCheck {
	c := boardClass(board)
	if r.Boards == nil {
		r.Boards = map[string]*boardCheck{}
	}
	if r.Boards[c] == nil {
		r.Boards[c] = &boardCheck{}
	}
	return r.Boards[c]
}

// runCheck waits for the pipeline to drain, then compares what PostgreSQL and Redis hold
// with what the service accepted.
func (b *bench) runCheck(ctx context.Context) *checkReport {
	r := &checkReport{AcceptedByKind: map[string]int64{}}
	events := b.ledger.all()
	byID := make(map[string]*event, len(events))
	for i := range events {
		e := &events[i]
		switch e.outcome {
		case accepted:
			r.Accepted++
			r.AcceptedByKind[e.kind.String()]++
			byID[e.id] = e
		case ambiguous:
			r.Ambiguous++
			byID[e.id] = e
		case unchanged:
			if e.kind == kindBest {
				r.LostUnchanged++
				r.example("%s: a best score of %d, above all the user sent before, answered unchanged", e.id, e.score)
			}
		}
	}
	want, maybe := b.ledger.pipelineRows()
	r.WantRows = want
	fmt.Fprintf(b.out, "exactly-once check: waiting up to %s for score_history to hold the %d rows of the %d accepted commands...\n", b.cfg.DrainTimeout, want, r.Accepted)
	if err := b.waitDrained(ctx, r, want, maybe); err != nil {
		return r.fail(err)
	}
	expected, err := b.checkHistory(ctx, r, byID)
	if err != nil {
		return r.fail(err)
	}
	if err := b.checkRequests(ctx, r, byID); err != nil {
		return r.fail(err)
	}
	if err := b.checkBoardEntries(ctx, r, expected); err != nil {
		return r.fail(err)
	}
	if err := b.checkRedis(ctx, r, expected); err != nil {
		return r.fail(err)
	}
	if err := b.pg.QueryRow(ctx, `SELECT count(*) FROM dead_letters`).Scan(&r.DeadLetters); err != nil {
		return r.fail(fmt.Errorf("count dead_letters: %w", err))
	}
	r.Pass = r.Drained && r.failures() == 0
	return r
}

func (r *checkReport) fail(err error) *checkReport {
	r.Error = err.Error()
	r.Pass = false
	return r
}

// waitDrained waits for the pipeline to apply every 202 before the check reads the tables.
func (b *bench) waitDrained(ctx context.Context, r *checkReport, want, maybe int64) error {
	rows, waited, drained, err := b.waitPipeline(ctx, want, maybe, b.cfg.DrainTimeout)
	r.HistoryRows, r.DrainWaitS, r.Drained = rows, seconds(waited), drained
	if err == nil && !drained {
		fmt.Fprintf(b.out, "  pipeline did not drain within %s: score_history has %d rows, %d wanted\n", b.cfg.DrainTimeout, rows, want)
	}
	return err
}

// waitPipeline polls the row count of score_history until it reaches want+maybe (every send
// that may be applied) or stops growing for 3 s at or above want; drained is false when
// timeout passes first.
func (b *bench) waitPipeline(ctx context.Context, want, maybe int64, timeout time.Duration) (rows int64, waited time.Duration, drained bool, err error) {
	start := time.Now()
	last, lastChange, lastPrint := int64(-1), start, start
	for {
		if err := b.pg.QueryRow(ctx, `SELECT count(*) FROM score_history`).Scan(&rows); err != nil {
			return rows, time.Since(start), false, fmt.Errorf("count score_history: %w", err)
		}
		now := time.Now()
		if rows != last {
			last, lastChange = rows, now
		}
		if rows == want+maybe || (rows >= want && now.Sub(lastChange) >= 3*time.Second) {
			return rows, now.Sub(start), true, nil
		}
		if now.Sub(start) >= timeout || ctx.Err() != nil {
			return rows, now.Sub(start), false, nil
		}
		if now.Sub(lastPrint) >= 5*time.Second {
			fmt.Fprintf(b.out, "  score_history: %d / %d rows\n", rows, want)
			lastPrint = now
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// entryKey names one expected board entry.
type entryKey struct {
	board, period string
	user          int32
}

// Row slots of an event: a best score or an increment leaves one row (slot 0); a match
// point leaves one on its match board (slot 0), on daily (slot 1) and on season (slot 2).
const (
	slotMain uint8 = iota
	slotDaily
	slotSeason
)

// The boards every match point also feeds, as shipped (match_points: true).
const (
	dailyBoard  = "daily"
	seasonBoard = "season"
)

// historyCheck compares score_history rows with the sends, row by row, and derives the
// value every board entry must hold. It is pure bookkeeping: rows are fed by checkHistory.
type historyCheck struct {
	r       *checkReport
	names   []string
	matches *matches
	byID    map[string]*event
	// periods are the periods a match point may count for on daily and season (those the
	// service named current during the run); empty: any.
	periods map[string]map[string]bool
	// fallback is the period an expected daily or season entry is filed under when the
	// event's row is missing (the check fails then anyway).
	fallback map[string]string

	seen   map[string]uint8      // event id -> slots with a row
	rowPer map[string]*[3]string // event id -> period of each slot's row
}

func newHistoryCheck(r *checkReport, names []string, m *matches, byID map[string]*event, periods map[string]map[string]bool) *historyCheck {
	h := &historyCheck{r: r, names: names, matches: m, byID: byID, periods: periods, fallback: map[string]string{},
		seen: make(map[string]uint8, len(byID)), rowPer: map[string]*[3]string{}}
	for board, set := range periods {
		for p := range set {
			if h.fallback[board] == "" || p > h.fallback[board] {
				h.fallback[board] = p
			}
		}
	}
	return h
}

// fullMask is the slots an applied event of kind k has rows in.
func fullMask(k kind) uint8 {
	if k == kindMatch {
		return 1<<slotMain | 1<<slotDaily | 1<<slotSeason
	}
	return 1 << slotMain
}

// slot says which of the event's rows (board, period) is, or false when the event cannot
// leave such a row.
func (h *historyCheck) slot(e *event, board, period string) (uint8, bool) {
	allowed := func(b string) bool { return len(h.periods[b]) == 0 || h.periods[b][period] }
	switch e.kind {
	case kindBest:
		return slotMain, board == globalBoard && period == allTime
	case kindIncr:
		return slotMain, board == pointsBoard && period == allTime
	}
	switch board {
	case matchBoard(h.matches.ids[h.matches.of(e.user)]):
		return slotMain, period == allTime
	case dailyBoard:
		return slotDaily, allowed(dailyBoard)
	case seasonBoard:
		return slotSeason, allowed(seasonBoard)
	}
	return 0, false
}

// row takes one score_history row.
func (h *historyCheck) row(id, board, period, user string, value int64) {
	r := h.r
	r.HistoryRows++
	e, ok := h.byID[id]
	if !ok {
		r.Extra++
		r.example("extra: score_history has event %s (%s/%s user %s, value %d) that was never accepted", id, board, period, user, value)
		return
	}
	s, ok := h.slot(e, board, period)
	if !ok || user != h.names[e.user] || value != e.score {
		r.WrongRows++
		r.example("wrong row: %s event %s is %s/%s user %s value %d, sent user %s value %d", e.kind, id, board, period, user, value, h.names[e.user], e.score)
		return
	}
	if h.seen[id]&(1<<s) != 0 {
		r.Duplicated++
		r.example("duplicated: %s event %s has a second row on %s (period %s)", e.kind, id, board, period)
		return
	}
	h.seen[id] |= 1 << s
	if e.kind == kindMatch {
		if h.rowPer[id] == nil {
			h.rowPer[id] = &[3]string{}
		}
		h.rowPer[id][s] = period
	}
}

// finish checks every sent event has the rows it must (202: all; ambiguous: none or all)
// and returns the value every entry must hold: a user's best score on global, the sum of
// its applied increments on points, of its applied points on its match's board, on daily
// and on season.
func (h *historyCheck) finish() map[entryKey]int64 {
	r := h.r
	expected := map[entryKey]int64{}
	ids := make([]string, 0, len(h.byID))
	for id := range h.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids) // deterministic examples
	for _, id := range ids {
		e := h.byID[id]
		mask, full := h.seen[id], fullMask(e.kind)
		switch {
		case e.outcome == accepted && mask != full:
			r.Missing++
			r.example("missing: accepted %s event %s (user %s, value %d) has rows in slots %03b of %03b", e.kind, id, h.names[e.user], e.score, mask, full)
		case e.outcome == ambiguous && mask == full:
			r.AmbiguousApplied++
		case e.outcome == ambiguous && mask != 0:
			r.Partial++
			r.example("partial: ambiguous %s event %s (user %s) has rows in slots %03b of %03b", e.kind, id, h.names[e.user], mask, full)
		}
		if e.outcome == ambiguous && mask == 0 {
			continue // not applied
		}
		// A 202 counts whether or not its rows are there (missing ones fail above); an
		// ambiguous send counts for the rows it left.
		for s := range uint8(3) {
			if full&(1<<s) == 0 || (e.outcome == ambiguous && mask&(1<<s) == 0) {
				continue
			}
			k := h.entryOf(e, s)
			if e.kind == kindBest {
				expected[k] = max(expected[k], e.score)
			} else {
				expected[k] += e.score
			}
		}
	}
	return expected
}

// entryOf is the entry slot s of event e applies to.
func (h *historyCheck) entryOf(e *event, s uint8) entryKey {
	switch {
	case e.kind == kindBest:
		return entryKey{globalBoard, allTime, e.user}
	case e.kind == kindIncr:
		return entryKey{pointsBoard, allTime, e.user}
	case s == slotMain:
		return entryKey{matchBoard(h.matches.ids[h.matches.of(e.user)]), allTime, e.user}
	}
	board := dailyBoard
	if s == slotSeason {
		board = seasonBoard
	}
	period := h.fallback[board]
	if p := h.rowPer[e.id]; p != nil && p[s] != "" {
		period = p[s]
	}
	return entryKey{board, period, e.user}
}

// checkHistory compares score_history with the sends and returns the value every entry
// must hold.
func (b *bench) checkHistory(ctx context.Context, r *checkReport, byID map[string]*event) (map[entryKey]int64, error) {
	rows, err := b.pg.Query(ctx, `SELECT event_id, board_id, period, user_id, value FROM score_history`)
	if err != nil {
		return nil, fmt.Errorf("read score_history: %w", err)
	}
	defer rows.Close()
	h := newHistoryCheck(r, b.users.names, b.matches, byID, b.periods)
	r.HistoryRows = 0
	for rows.Next() {
		var id, board, period, user string
		var value int64
		if err := rows.Scan(&id, &board, &period, &user, &value); err != nil {
			return nil, fmt.Errorf("scan score_history: %w", err)
		}
		h.row(id, board, period, user, value)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read score_history: %w", err)
	}
	expected := h.finish()
	for k := range expected {
		r.Entries++
		r.board(k.board).Entries++
		if k.board == globalBoard {
			r.Users++
		}
	}
	return expected, nil
}

// checkRequests checks every 202 left its row in score_requests.
func (b *bench) checkRequests(ctx context.Context, r *checkReport, byID map[string]*event) error {
	rows, err := b.pg.Query(ctx, `SELECT event_id FROM score_requests`)
	if err != nil {
		return fmt.Errorf("read score_requests: %w", err)
	}
	defer rows.Close()
	have := make(map[string]struct{}, len(byID))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("scan score_requests: %w", err)
		}
		have[id] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read score_requests: %w", err)
	}
	for id, e := range byID {
		if _, ok := have[id]; !ok && e.outcome == accepted {
			r.RequestsMissing++
			r.example("score_requests: accepted %s event %s has no row", e.kind, id)
		}
	}
	return nil
}

// checkBoardEntries checks board_entries holds exactly the expected entries: every user's
// best on global, sums on points, the match boards, daily and season, nothing else (the
// bulk-seeded big board excepted).
func (b *bench) checkBoardEntries(ctx context.Context, r *checkReport, expected map[entryKey]int64) error {
	rows, err := b.pg.Query(ctx, `SELECT board_id, period, user_id, score FROM board_entries WHERE board_id <> $1`, b.cfg.BigBoard)
	if err != nil {
		return fmt.Errorf("read board_entries: %w", err)
	}
	defer rows.Close()
	index := b.userIndex()
	found := map[entryKey]bool{}
	for rows.Next() {
		var board, period, user string
		var score int64
		if err := rows.Scan(&board, &period, &user, &score); err != nil {
			return fmt.Errorf("scan board_entries: %w", err)
		}
		id, ok := index[user]
		k := entryKey{board, period, id}
		want, wanted := expected[k]
		if !ok || !wanted {
			r.PGExtra++
			r.board(board).PGExtra++
			r.example("board_entries: unexpected entry %s/%s user %s with value %d", board, period, user, score)
			continue
		}
		found[k] = true
		if score != want {
			r.PGWrong++
			r.board(board).PGWrong++
			r.example("board_entries: %s/%s user %s has %d, want %d", board, period, user, score, want)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read board_entries: %w", err)
	}
	for k, want := range expected {
		if !found[k] {
			r.PGMissing++
			r.board(k.board).PGMissing++
			r.example("board_entries: %s/%s user %s missing, want %d", k.board, k.period, b.users.names[k.user], want)
		}
	}
	return nil
}

func (b *bench) userIndex() map[string]int32 {
	index := make(map[string]int32, len(b.users.names))
	for i, n := range b.users.names {
		index[n] = int32(i)
	}
	return index
}

// boardPeriod names one board period.
type boardPeriod struct{ board, period string }

// redisDiff counts how one board period's Redis state differs from the expected entries.
type redisDiff struct {
	wrong, missing, extra, zwrong, zcard int64
	examples                             []string
}

// compareStored compares a board period's stored entries with the expected values (all
// these boards order desc, so an entry's sort key is its value).
func compareStored(bp boardPeriod, stored []storage.StoredEntry, want map[int32]int64, index map[string]int32, names []string, d *redisDiff) {
	seen := make(map[string]bool, len(stored))
	for _, e := range stored {
		seen[e.UserID] = true
		id, ok := index[e.UserID]
		w, wanted := want[id]
		if !ok || !wanted {
			d.extra++
			d.examples = append(d.examples, fmt.Sprintf("redis %s/%s: unexpected entry of %s (%d)", bp.board, bp.period, e.UserID, e.Score))
			continue
		}
		if !e.Sorted || int64(e.SortKey) != e.Score {
			d.zwrong++
			d.examples = append(d.examples, fmt.Sprintf("redis %s/%s: user %s: sorted set has %v (present %v), entry says %d", bp.board, bp.period, e.UserID, e.SortKey, e.Sorted, e.Score))
			continue
		}
		if e.Score != w {
			d.wrong++
			d.examples = append(d.examples, fmt.Sprintf("redis %s/%s: user %s has %d, want %d", bp.board, bp.period, e.UserID, e.Score, w))
		}
	}
	for id, w := range want {
		if !seen[names[id]] {
			d.missing++
			d.examples = append(d.examples, fmt.Sprintf("redis %s/%s: user %s has no entry, want %d", bp.board, bp.period, names[id], w))
		}
	}
}

// checkRedis checks every board period's entries hold exactly the expected values and its
// sorted set agrees with them. The projection may trail PostgreSQL briefly, so differences
// are re-read for up to 15 s before they count.
func (b *bench) checkRedis(ctx context.Context, r *checkReport, expected map[entryKey]int64) error {
	want := map[boardPeriod]map[int32]int64{{globalBoard, allTime}: {}}
	for k, v := range expected {
		bp := boardPeriod{k.board, k.period}
		if want[bp] == nil {
			want[bp] = map[int32]int64{}
		}
		want[bp][k.user] = v
	}
	// Every board period Redis holds is read, not only those expected: one the history
	// explains nothing on must be empty (the big board is the bigreads phase's).
	held, err := b.redisBoardPeriods(ctx)
	if err != nil {
		return err
	}
	for _, bp := range held {
		if bp.board != b.cfg.BigBoard && want[bp] == nil {
			want[bp] = map[int32]int64{}
		}
	}
	order := make([]boardPeriod, 0, len(want))
	for bp := range want {
		order = append(order, bp)
		r.board(bp.board).Periods++
	}
	slices.SortFunc(order, func(a, c boardPeriod) int {
		return cmp.Or(cmp.Compare(a.board, c.board), cmp.Compare(a.period, c.period))
	})
	index := b.userIndex()
	deadline := time.Now().Add(15 * time.Second)
	for {
		diffs, err := b.redisDiffs(ctx, order, want, index)
		if err != nil {
			return err
		}
		var bad int64
		for _, d := range diffs {
			bad += d.wrong + d.missing + d.extra + d.zwrong
		}
		if bad == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			for i, bp := range order {
				d, c := diffs[i], r.board(bp.board)
				c.RedisWrong += d.wrong
				c.RedisMissing += d.missing
				c.RedisExtra += d.extra
				c.RedisZSetWrong += d.zwrong
				r.RedisWrong += d.wrong
				r.RedisMissing += d.missing
				r.RedisExtra += d.extra
				r.RedisZSetWrong += d.zwrong
				if bp == (boardPeriod{globalBoard, allTime}) {
					r.RedisZCard = d.zcard
				}
				for _, e := range d.examples {
					r.example("%s", e)
				}
			}
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// redisBoardPeriods lists the board periods whose entries or sorted set Redis holds under
// the run's prefix ({prefix}:{board}:{period}:u and :z).
func (b *bench) redisBoardPeriods(ctx context.Context) ([]boardPeriod, error) {
	head := b.cfg.Prefix + ":{"
	seen := map[boardPeriod]bool{}
	var out []boardPeriod
	for _, suffix := range []string{":u", ":z"} {
		iter := b.rdb.Scan(ctx, 0, head+"*}:*"+suffix, 1000).Iterator()
		for iter.Next(ctx) {
			board, rest, ok := strings.Cut(strings.TrimPrefix(iter.Val(), head), "}:")
			if !ok {
				continue
			}
			bp := boardPeriod{board, strings.TrimSuffix(rest, suffix)}
			if !seen[bp] {
				seen[bp] = true
				out = append(out, bp)
			}
		}
		if err := iter.Err(); err != nil {
			return nil, fmt.Errorf("redis: list board periods: %w", err)
		}
	}
	return out, nil
}

// redisDiffs reads every board period's entries and sorted-set size and compares them with
// the expected values.
func (b *bench) redisDiffs(ctx context.Context, order []boardPeriod, want map[boardPeriod]map[int32]int64, index map[string]int32) ([]redisDiff, error) {
	store := storage.NewBoards(b.rdb, b.cfg.Prefix, 0)
	diffs := make([]redisDiff, len(order))
	for i, bp := range order {
		stored, zcard, err := store.Stored(ctx, bp.board, bp.period)
		if err != nil {
			return nil, fmt.Errorf("redis %s/%s: %w", bp.board, bp.period, err)
		}
		d := &diffs[i]
		compareStored(bp, stored, want[bp], index, b.users.names, d)
		d.zcard = zcard
		if d.zcard != int64(len(want[bp])) {
			d.zwrong++
			d.examples = append(d.examples, fmt.Sprintf("redis %s/%s: sorted set has %d members, want %d", bp.board, bp.period, d.zcard, len(want[bp])))
		}
	}
	return diffs, nil
}
