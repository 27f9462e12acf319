package main

import (
	"context"
	"fmt"
	"strconv"
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

	Missing          int64 `json:"missing"`           // a 202 event id absent from score_history
	Duplicated       int64 `json:"duplicated"`        // an event id with more than one row
	Extra            int64 `json:"extra"`             // a row whose event id was not accepted (nor ambiguous)
	WrongRows        int64 `json:"wrong_rows"`        // a row whose board, period, user or value differ from what was sent
	AmbiguousApplied int64 `json:"ambiguous_applied"` // ambiguous sends found once in score_history (not a failure)
	RequestsMissing  int64 `json:"score_requests_missing"`

	Users          int64    `json:"users"`
	PGWrong        int64    `json:"board_entries_wrong"`
	PGMissing      int64    `json:"board_entries_missing"`
	PGExtra        int64    `json:"board_entries_extra"`
	RedisWrong     int64    `json:"redis_hash_wrong"`
	RedisMissing   int64    `json:"redis_hash_missing"`
	RedisExtra     int64    `json:"redis_hash_extra"`
	RedisZSetWrong int64    `json:"redis_zset_wrong"`
	RedisZCard     int64    `json:"redis_zcard"`
	DeadLetters    int64    `json:"dead_letters"`
	Examples       []string `json:"examples,omitempty"`
	Error          string   `json:"error,omitempty"`
}

func (r *checkReport) example(format string, args ...any) {
	if len(r.Examples) < 20 {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

func (r *checkReport) failures() int64 {
	return r.Missing + r.Duplicated + r.Extra + r.WrongRows + r.RequestsMissing +
		r.PGWrong + r.PGMissing + r.PGExtra + r.RedisWrong + r.RedisMissing + r.RedisExtra + r.RedisZSetWrong
}

// runCheck waits for the pipeline to drain, then compares what PostgreSQL and Redis hold
// with what the service accepted.
func (b *bench) runCheck(ctx context.Context) *checkReport {
	r := &checkReport{}
	events := b.ledger.all()
	byID := make(map[string]*event, len(events))
	for i := range events {
		e := &events[i]
		switch e.outcome {
		case accepted:
			r.Accepted++
			byID[e.id] = e
		case ambiguous:
			r.Ambiguous++
			byID[e.id] = e
		}
	}
	fmt.Fprintf(b.out, "exactly-once check: waiting up to %s for score_history to hold the %d accepted scores...\n", b.cfg.DrainTimeout, r.Accepted)
	if err := b.waitDrained(ctx, r); err != nil {
		return r.fail(err)
	}
	expected, err := b.checkHistory(ctx, r, byID)
	if err != nil {
		return r.fail(err)
	}
	r.Users = int64(len(expected))
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
func (b *bench) waitDrained(ctx context.Context, r *checkReport) error {
	rows, waited, drained, err := b.waitPipeline(ctx, r.Accepted, r.Ambiguous, b.cfg.DrainTimeout)
	r.HistoryRows, r.DrainWaitS, r.Drained = rows, seconds(waited), drained
	if err == nil && !drained {
		fmt.Fprintf(b.out, "  pipeline did not drain within %s: score_history has %d rows, %d accepted\n", b.cfg.DrainTimeout, rows, r.Accepted)
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

// checkHistory compares score_history with the sends, and returns the score each user
// must hold: the highest of its 202s and of its ambiguous sends that were applied.
func (b *bench) checkHistory(ctx context.Context, r *checkReport, byID map[string]*event) (map[int32]int64, error) {
	rows, err := b.pg.Query(ctx, `SELECT event_id, board_id, period, user_id, value FROM score_history`)
	if err != nil {
		return nil, fmt.Errorf("read score_history: %w", err)
	}
	defer rows.Close()
	seen := make(map[string]int, len(byID))
	expected := map[int32]int64{}
	var rowCount int64
	for rows.Next() {
		var id, board, period, user string
		var value int64
		if err := rows.Scan(&id, &board, &period, &user, &value); err != nil {
			return nil, fmt.Errorf("scan score_history: %w", err)
		}
		rowCount++
		seen[id]++
		e, ok := byID[id]
		if !ok {
			r.Extra++
			r.example("extra: score_history has event %s (user %s, value %d) that was never accepted", id, user, value)
			continue
		}
		if board != "global" || period != "all_time" || user != b.users.names[e.user] || value != e.score {
			r.WrongRows++
			r.example("wrong row: event %s is %s/%s user %s value %d, sent user %s score %d", id, board, period, user, value, b.users.names[e.user], e.score)
		}
		if seen[id] == 1 && e.outcome == ambiguous {
			r.AmbiguousApplied++
			expected[e.user] = max(expected[e.user], e.score)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read score_history: %w", err)
	}
	r.HistoryRows = rowCount
	for id, e := range byID {
		n := seen[id]
		if n > 1 {
			r.Duplicated++
			r.example("duplicated: event %s appears %d times in score_history", id, n)
		}
		if e.outcome != accepted {
			continue
		}
		if n == 0 {
			r.Missing++
			r.example("missing: accepted event %s (user %s, score %d) is not in score_history", id, b.users.names[e.user], e.score)
		}
		expected[e.user] = max(expected[e.user], e.score)
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
			r.example("score_requests: accepted event %s has no row", id)
		}
	}
	return nil
}

// checkBoardEntries checks board_entries holds exactly the expected best of every user.
func (b *bench) checkBoardEntries(ctx context.Context, r *checkReport, expected map[int32]int64) error {
	rows, err := b.pg.Query(ctx, `SELECT user_id, score FROM board_entries WHERE board_id = 'global' AND period = 'all_time'`)
	if err != nil {
		return fmt.Errorf("read board_entries: %w", err)
	}
	defer rows.Close()
	index := b.userIndex()
	found := map[int32]bool{}
	for rows.Next() {
		var user string
		var score int64
		if err := rows.Scan(&user, &score); err != nil {
			return fmt.Errorf("scan board_entries: %w", err)
		}
		id, ok := index[user]
		want, wanted := expected[id]
		if !ok || !wanted {
			r.PGExtra++
			r.example("board_entries: unexpected user %s with score %d", user, score)
			continue
		}
		found[id] = true
		if score != want {
			r.PGWrong++
			r.example("board_entries: user %s has %d, want %d", user, score, want)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read board_entries: %w", err)
	}
	for id := range expected {
		if !found[id] {
			r.PGMissing++
			r.example("board_entries: user %s missing, want %d", b.users.names[id], expected[id])
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

// checkRedis checks the board hash holds exactly the expected best of every user and the
// sorted set agrees with it. The projection may trail PostgreSQL briefly, so differences
// are re-read for up to 15 s before they count.
func (b *bench) checkRedis(ctx context.Context, r *checkReport, expected map[int32]int64) error {
	hashKey := b.cfg.Prefix + ":{global:all_time}:u"
	zsetKey := b.cfg.Prefix + ":{global:all_time}:z"
	index := b.userIndex()
	deadline := time.Now().Add(15 * time.Second)
	for {
		hash, err := b.rdb.HGetAll(ctx, hashKey).Result()
		if err != nil {
			return fmt.Errorf("redis HGETALL %s: %w", hashKey, err)
		}
		var wrong, missing, extra, zwrong int64
		var examples []string
		members := make([]string, 0, len(hash))
		memberScores := make([]int64, 0, len(hash))
		for user, val := range hash {
			id, ok := index[user]
			want, wanted := expected[id]
			if !ok || !wanted {
				extra++
				examples = append(examples, fmt.Sprintf("redis: unexpected hash field %s = %q", user, val))
				continue
			}
			parts := strings.SplitN(val, "|", 4)
			score, err := strconv.ParseInt(parts[0], 10, 64)
			if err != nil || score != want {
				wrong++
				examples = append(examples, fmt.Sprintf("redis: user %s has %q, want score %d", user, val, want))
			}
			if len(parts) == 4 {
				members = append(members, parts[3])
				memberScores = append(memberScores, score)
			}
		}
		for id, want := range expected {
			if _, ok := hash[b.users.names[id]]; !ok {
				missing++
				examples = append(examples, fmt.Sprintf("redis: user %s missing from the hash, want %d", b.users.names[id], want))
			}
		}
		for start := 0; start < len(members); start += 1000 {
			end := min(start+1000, len(members))
			scores, err := b.rdb.ZMScore(ctx, zsetKey, members[start:end]...).Result()
			if err != nil {
				return fmt.Errorf("redis ZMSCORE %s: %w", zsetKey, err)
			}
			for i, s := range scores {
				if int64(s) != memberScores[start+i] {
					zwrong++
					examples = append(examples, fmt.Sprintf("redis: sorted set member %s has %v, hash says %d", members[start+i], s, memberScores[start+i]))
				}
			}
		}
		zcard, err := b.rdb.ZCard(ctx, zsetKey).Result()
		if err != nil {
			return fmt.Errorf("redis ZCARD %s: %w", zsetKey, err)
		}
		if zcard != int64(len(expected)) {
			zwrong++
			examples = append(examples, fmt.Sprintf("redis: sorted set has %d members, want %d", zcard, len(expected)))
		}
		if wrong+missing+extra+zwrong == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			r.RedisWrong, r.RedisMissing, r.RedisExtra, r.RedisZSetWrong, r.RedisZCard = wrong, missing, extra, zwrong, zcard
			for _, e := range examples {
				r.example("%s", e)
			}
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}
