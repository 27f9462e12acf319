package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/openleaderboard/leaderboard/messages"
)

// entryOrder renders a top's entries as "user:score" in rank order.
func entryOrder(t *testing.T, r response) string {
	t.Helper()
	entries, ok := r.body["entries"].([]any)
	if !ok {
		t.Fatalf("no entries in %d %s", r.status, r.raw)
	}
	var out []string
	for i, e := range entries {
		m := e.(map[string]any)
		if num(m["rank"]) != int64(i+1) {
			t.Fatalf("entry %d has rank %d: %s", i, num(m["rank"]), r.raw)
		}
		out = append(out, fmt.Sprintf("%s:%d", m["user_id"], num(m["score"])))
	}
	return strings.Join(out, " ")
}

// TestBoardsEndpoints: every generic endpoint on every shipped board, by its operator and
// order, with metadata, and the listing of boards.
func TestBoardsEndpoints(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := dayClock()
	svc := env.startWith(nil, clock)
	srv := mintToken(t, "game-server", "server")
	reader := mintToken(t, "reader")

	r := svc.do(t, http.MethodGet, "/v1/boards", reader, "")
	if r.status != 200 {
		t.Fatalf("GET /v1/boards: %d %s", r.status, r.raw)
	}
	listed := map[string]map[string]any{}
	for _, b := range r.body["boards"].([]any) {
		m := b.(map[string]any)
		listed[m["id"].(string)] = m
	}
	today := clock().UTC().Format(time.DateOnly)
	y, w := clock().UTC().ISOWeek()
	week := fmt.Sprintf("%04d-W%02d", y, w)
	for id, want := range map[string]string{
		"global":  "best desc all_time all_time",
		"points":  "incr desc all_time all_time",
		"daily":   "incr desc daily " + today,
		"season":  "incr desc season 1",
		"match":   "incr desc match all_time",
		"fastest": "best asc weekly " + week,
	} {
		m := listed[id]
		if got := fmt.Sprint(m["operator"], " ", m["order"], " ", m["period"], " ", m["current_period"]); got != want {
			t.Errorf("board %s listed as %q, want %q", id, got, want)
		}
	}
	if listed["daily"]["next_reset_at"] == nil || listed["daily"]["previous_period"] != clock().UTC().AddDate(0, 0, -1).Format(time.DateOnly) {
		t.Errorf("daily: %v", listed["daily"])
	}
	if listed["global"]["next_reset_at"] != nil || listed["global"]["previous_period"] != nil || listed["daily"]["server_only"] != true {
		t.Errorf("global %v, daily %v", listed["global"], listed["daily"])
	}

	write := func(board, tok, body string) response {
		t.Helper()
		return svc.do(t, http.MethodPost, "/v1/boards/"+board+"/scores?wait=true", tok, body)
	}
	mustWrite := func(board, tok, body string) {
		t.Helper()
		if r := write(board, tok, body); r.status != 200 || r.body["status"] != "applied" {
			t.Fatalf("write %s %s: %d %s", board, body, r.status, r.raw)
		}
	}
	// best, desc: the better value stays; a worse one is "unchanged".
	mustWrite("global", mintToken(t, "ann"), `{"value": 30}`)
	mustWrite("global", mintToken(t, "bo"), `{"value": 50, "metadata": {"map": "dunes", "kills": 7}}`)
	if r := write("global", mintToken(t, "bo"), `{"value": 40}`); r.status != 200 || r.body["status"] != "unchanged" || num(r.body["score"]) != 50 {
		t.Errorf("a lower best: %d %s", r.status, r.raw)
	}
	// incr: deltas add up, and the answer carries the new total.
	mustWrite("points", mintToken(t, "ann"), `{"value": 5}`)
	r = write("points", mintToken(t, "ann"), `{"value": 7, "event_id": "pts-2"}`)
	if r.status != 200 || num(r.body["score"]) != 12 || num(r.body["new_score"]) != 12 || r.body["processed_event_id"] != "pts-2" {
		t.Errorf("second increment: %d %s", r.status, r.raw)
	}
	// Server-only boards (daily, season, match) take writes from game servers.
	for _, b := range []string{"daily", "season", "match:m1"} {
		if r := write(b, mintToken(t, "ann"), `{"value": 1}`); r.status != 403 || r.body["error_code"] != "server_only_board" {
			t.Errorf("player token on %s: %d %s", b, r.status, r.raw)
		}
		mustWrite(b, srv, `{"value": 3, "user_id": "ann"}`)
		mustWrite(b, srv, `{"value": 4, "user_id": "bo"}`)
		mustWrite(b, srv, `{"value": 2, "user_id": "ann"}`)
	}
	// best, asc: the lower lap time ranks first.
	mustWrite("fastest", mintToken(t, "ann"), `{"value": 61000}`)
	mustWrite("fastest", mintToken(t, "bo"), `{"value": 59000}`)
	if r := write("fastest", mintToken(t, "bo"), `{"value": 65000}`); r.body["status"] != "unchanged" || num(r.body["score"]) != 59000 {
		t.Errorf("a slower lap: %d %s", r.status, r.raw)
	}
	mustWrite("fastest", mintToken(t, "ann"), `{"value": 58000}`)

	for board, want := range map[string]string{
		"global": "bo:50 ann:30", "points": "ann:12", "daily": "ann:5 bo:4", "season": "ann:5 bo:4",
		"match:m1": "ann:5 bo:4", "fastest": "ann:58000 bo:59000",
	} {
		r := svc.do(t, http.MethodGet, "/v1/boards/"+board+"/top?limit=10", reader, "")
		if r.status != 200 || entryOrder(t, r) != want || r.body["board"] != board || r.body["period"] == "" || num(r.body["version"]) < 1 {
			t.Errorf("top of %s: %d %s, want %s", board, r.status, r.raw, want)
		}
		first := strings.SplitN(want, ":", 2)[0]
		u := svc.do(t, http.MethodGet, "/v1/boards/"+board+"/users/"+first, reader, "")
		if u.status != 200 || num(u.body["rank"]) != 1 || u.body["board"] != board {
			t.Errorf("user %s on %s: %d %s", first, board, u.status, u.raw)
		}
	}
	top := svc.do(t, http.MethodGet, "/v1/boards/global/top", reader, "")
	bo := top.body["entries"].([]any)[0].(map[string]any)
	if meta, _ := json.Marshal(bo["metadata"]); string(meta) != `{"kills":7,"map":"dunes"}` {
		t.Errorf("metadata in the top: %s", top.raw)
	}
	if u := svc.do(t, http.MethodGet, "/v1/boards/global/users/bo", reader, ""); u.body["metadata"] == nil {
		t.Errorf("metadata of bo's entry: %s", u.raw)
	}
	// The global endpoints read the same board.
	if g := svc.do(t, http.MethodGet, "/v1/leaderboard/top", reader, ""); entryOrder(t, g) != "bo:50 ann:30" {
		t.Errorf("/v1/leaderboard/top: %s", g.raw)
	}
}

// TestBoardsBadInput: every malformed write or read gets its documented 4xx and changes
// nothing.
func TestBoardsBadInput(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	player, srv := mintToken(t, "player"), mintToken(t, "srv", "server")
	big := `{"k": "` + strings.Repeat("x", 1100) + `"}`
	writes := []struct {
		name, board, tok, body string
		status                 int
		code                   string
	}{
		{"unknown board", "nope", player, `{"value": 1}`, 404, "unknown_board"},
		{"unknown match board kind", "global:m1", player, `{"value": 1}`, 404, "unknown_board"},
		{"bad match id", "match:a%20b", srv, `{"value": 1}`, 404, "unknown_board"},
		{"value out of bounds", "global", player, `{"value": -1}`, 400, "value_out_of_range"},
		{"value past 2^53", "global", player, `{"value": 9007199254740992}`, 400, "value_out_of_range"},
		{"lap time of 0 on an asc board with min 1", "fastest", player, `{"value": 0}`, 400, "value_out_of_range"},
		{"negative delta", "points", player, `{"value": -5}`, 400, "value_out_of_range"},
		{"zero delta", "points", player, `{"value": 0}`, 400, "value_out_of_range"},
		{"delta over max_delta", "points", player, `{"value": 1000001}`, 400, "value_out_of_range"},
		{"value not an integer", "global", player, `{"value": 1.5}`, 400, "invalid_value"},
		{"missing value", "global", player, `{"metadata": {}}`, 400, "invalid_value"},
		{"metadata over 1 KB", "global", player, `{"value": 1, "metadata": ` + big + `}`, 400, "invalid_metadata"},
		{"metadata not an object", "global", player, `{"value": 1, "metadata": [1, 2]}`, 400, "invalid_metadata"},
		{"metadata a string", "global", player, `{"value": 1, "metadata": "x"}`, 400, "invalid_metadata"},
		{"unknown field", "global", player, `{"value": 1, "score": 2}`, 400, "unknown_field"},
		{"player writes a server-only board", "daily", player, `{"value": 1}`, 403, "server_only_board"},
		{"player writes for another user", "global", player, `{"value": 1, "user_id": "x"}`, 403, "forbidden"},
	}
	for _, c := range writes {
		r := svc.do(t, http.MethodPost, "/v1/boards/"+c.board+"/scores", c.tok, c.body)
		if r.status != c.status || r.body["error_code"] != c.code || !hasText(r.body["message"]) {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.raw, c.status, c.code)
		}
	}
	reads := []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/boards/nope/top", 404, "unknown_board"},
		{"/v1/boards/daily/top?period=2026-02-30", 400, "invalid_period"},
		{"/v1/boards/daily/top?period=2026-2-3", 400, "invalid_period"},
		{"/v1/boards/daily/top?period=all_time", 400, "invalid_period"},
		{"/v1/boards/fastest/top?period=2027-W53", 400, "invalid_period"},
		{"/v1/boards/season/top?period=S9", 404, "unknown_period"},
		{"/v1/boards/season/top?period=a%20b", 400, "invalid_period"},
		{"/v1/boards/global/top?period=2026-01-01", 400, "invalid_period"},
		{"/v1/boards/global/top?period=previous", 404, "unknown_period"},
		{"/v1/boards/global/top?limit=0", 400, "invalid_limit"},
		{"/v1/boards/global/users/bad%20id", 400, "invalid_user_id"},
		{"/v1/boards/global/users/nobody", 404, "not_found"},
		{"/v1/boards/match:never-played/top", 404, "unknown_board"},
	}
	for _, c := range reads {
		if r := svc.do(t, http.MethodGet, c.path, player, ""); r.status != c.status || r.body["error_code"] != c.code {
			t.Errorf("GET %s: %d %s, want %d %s", c.path, r.status, r.raw, c.status, c.code)
		}
	}
	if n := env.count(`SELECT count(*) FROM score_requests`); n != 0 {
		t.Fatalf("bad input published %d commands", n)
	}
}

// TestPeriodRollover: with the clock just before local midnight (Asia/Kolkata, UTC+5:30), an
// event accepted at 23:59:59.9 counts for that day although the projector only applies it
// after midnight; the new day starts empty, the old one stays readable, and a stream on
// the current period moves to the new day at the reset and sends its snapshot.
func TestPeriodRollover(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	clock := &testClock{}
	clock.set(time.Date(2026, 7, 1, 23, 59, 59, 900_000_000, kolkata))
	broker := "127.0.0.1:" + freePort(t)
	tz := map[string]string{"LEADERBOARD_TIMEZONE": "Asia/Kolkata", "LEADERBOARD_SSE_HEARTBEAT": "200ms"}
	// The API alone first: nothing is applied before midnight.
	api := env.startWith(merge(tz, map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker, "LEADERBOARD_ROLES": "api"}), clock.now)
	srv := mintToken(t, "game-server", "server")
	viewer := mintToken(t, "viewer")
	stream := api.mustStream(t, "board=daily&token="+api.realtimeToken(t, viewer), "")
	eventually(t, 20*time.Second, func() string {
		if ups := stream.named("leaderboard.updated"); len(ups) == 0 || ups[0].data["period"] != "2026-07-01" {
			return fmt.Sprintf("snapshot on connect: %v", ups)
		}
		return ""
	})
	if r := api.do(t, http.MethodPost, "/v1/boards/daily/scores", srv, `{"value": 9, "user_id": "late", "event_id": "late-1"}`); r.status != 202 {
		t.Fatalf("write at 23:59:59.9: %d %s", r.status, r.raw)
	}

	clock.set(time.Date(2026, 7, 2, 0, 0, 0, 100_000_000, kolkata))
	env.startWith(merge(tz, map[string]string{"LEADERBOARD_KAFKA_BROKERS": broker, "LEADERBOARD_ROLES": "relay,projector",
		"LEADERBOARD_HTTP_ADDR": "127.0.0.1:" + freePort(t)}), clock.now)
	eventually(t, 20*time.Second, func() string {
		r := api.do(t, http.MethodGet, "/v1/boards/daily/users/late?period=2026-07-01", viewer, "")
		if r.status != 200 || num(r.body["score"]) != 9 {
			return "the late event on 2026-07-01: " + r.raw
		}
		return ""
	})
	var applied time.Time
	if err := env.db().QueryRow(context.Background(), `SELECT occurred_at FROM score_history WHERE event_id = 'late-1'`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if got := applied.In(kolkata).Format(time.DateOnly); got != "2026-07-01" {
		t.Errorf("the event was accepted on %s, local", got)
	}
	if r := api.do(t, http.MethodGet, "/v1/boards/daily/top", viewer, ""); r.status != 200 || r.body["period"] != "2026-07-02" || entryOrder(t, r) != "" {
		t.Errorf("the new day: %d %s", r.status, r.raw)
	}
	if r := api.do(t, http.MethodGet, "/v1/boards/daily/top?period=previous", viewer, ""); r.body["period"] != "2026-07-01" || entryOrder(t, r) != "late:9" {
		t.Errorf("the previous day: %d %s", r.status, r.raw)
	}
	// The stream moved on: its newest snapshot is the new, empty day.
	eventually(t, 20*time.Second, func() string {
		ups := stream.named("leaderboard.updated")
		last := ups[len(ups)-1]
		if last.data["period"] != "2026-07-02" || len(last.data["entries"].([]any)) != 0 {
			stream.mu.Lock()
			notes := len(stream.notes)
			stream.mu.Unlock()
			return fmt.Sprintf("stream at %v (%d events, %d notes)\n%s", last.data, len(ups), notes, api.logs.String())
		}
		return ""
	})
	// A write now counts for the new day, and reaches the moved stream.
	if r := api.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, `{"value": 4, "user_id": "early"}`); r.status != 200 || r.body["period"] != "2026-07-02" {
		t.Fatalf("write after midnight: %d %s", r.status, r.raw)
	}
	eventually(t, 20*time.Second, func() string {
		ups := stream.named("leaderboard.updated")
		last := ups[len(ups)-1]
		if entries, _ := last.data["entries"].([]any); len(entries) != 1 || last.data["period"] != "2026-07-02" {
			return fmt.Sprintf("stream at %v", last.data)
		}
		return ""
	})
	versions := stream.versions()
	for i := 1; i < len(versions); i++ {
		if versions[i] <= versions[i-1] {
			t.Fatalf("stream versions went back across the reset: %v", versions)
		}
	}
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestIncrementAppliedOnce: an increment retried, redelivered by Kafka and replayed from
// the outbox adds once.
func TestIncrementAppliedOnce(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	svc := env.start(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker, "LEADERBOARD_OUTBOX_PRUNE_INTERVAL": "1h"})
	env.keepOutboxRows()
	tok := mintToken(t, "inc")
	for _, body := range []string{`{"value": 10, "event_id": "inc-1"}`, `{"value": 5, "event_id": "inc-2"}`} {
		if r := svc.do(t, http.MethodPost, "/v1/boards/points/scores?wait=true", tok, body); r.status != 200 {
			t.Fatalf("%s: %d %s", body, r.status, r.raw)
		}
	}
	if r := svc.do(t, http.MethodPost, "/v1/boards/points/scores", tok, `{"value": 10, "event_id": "inc-1"}`); r.status != 202 {
		t.Fatalf("client retry: %d %s", r.status, r.raw)
	}
	// Kafka delivers inc-1 again.
	var period string
	dup, _ := json.Marshal(messages.ScoreSubmitted{EventID: "inc-1", Board: "points", Period: "all_time", UserID: "inc", Value: 10, OccurredAt: time.Now()})
	produceRaw(t, broker, "leaderboard.score-events", &sarama.ProducerMessage{Key: sarama.StringEncoder("inc"), Value: sarama.ByteEncoder(dup)})
	// The outbox is replayed from the start.
	if n := env.replayOutbox(); n != 2 {
		t.Fatalf("%d outbox rows replayed, want the 2 increments", n)
	}
	const redelivered = `leaderboard_projector_events_total{board="points",result="redelivered"}`
	eventually(t, 20*time.Second, func() string {
		if got := scrape(t, svc)[redelivered]; got < 3 { // the Kafka copy and the two replayed rows
			return fmt.Sprintf("%v redeliveries", got)
		}
		return ""
	})
	r := svc.do(t, http.MethodGet, "/v1/boards/points/users/inc", tok, "")
	if r.status != 200 || num(r.body["score"]) != 15 {
		t.Fatalf("after the retry, the redelivery and the replay: %d %s, want 15", r.status, r.raw)
	}
	if err := env.db().QueryRow(context.Background(), `SELECT period FROM board_entries WHERE user_id = 'inc'`).Scan(&period); err != nil || period != "all_time" {
		t.Fatalf("entry period %q, %v", period, err)
	}
	if n := env.count(`SELECT version FROM board_entries WHERE user_id = 'inc'`); n != 2 {
		t.Fatalf("entry version %d, want 2 (two increments)", n)
	}
}

// TestSeasons: an admin starts a season; writes go to it from then on, the old one stays
// readable, and every start is audited.
func TestSeasons(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(map[string]string{"LEADERBOARD_REDIS_PAST_PERIODS": "0"}) // Redis keeps the current season only
	admin, srv, player := mintToken(t, "ops-sam", "admin"), mintToken(t, "gs", "server"), mintToken(t, "viewer")
	mustApplyTo := func(board, body string) response {
		t.Helper()
		r := svc.do(t, http.MethodPost, "/v1/boards/"+board+"/scores?wait=true", srv, body)
		if r.status != 200 {
			t.Fatalf("write %s: %d %s", body, r.status, r.raw)
		}
		return r
	}
	if r := mustApplyTo("season", `{"value": 3, "user_id": "sia"}`); r.body["period"] != "1" {
		t.Fatalf("first season: %s", r.raw)
	}
	r := svc.do(t, http.MethodPost, "/admin/boards/season/seasons", admin, `{"season": "2026-summer", "reason": "summer event"}`)
	if r.status != 201 || r.body["season"] != "2026-summer" || r.body["previous_season"] != "1" {
		t.Fatalf("start a season: %d %s", r.status, r.raw)
	}
	if r := mustApplyTo("season", `{"value": 8, "user_id": "sia"}`); r.body["period"] != "2026-summer" || num(r.body["score"]) != 8 {
		t.Fatalf("a write after the start: %s", r.raw)
	}
	if r := svc.do(t, http.MethodGet, "/v1/boards/season/top?period=1", player, ""); entryOrder(t, r) != "sia:3" {
		t.Errorf("the old season: %s", r.raw)
	}
	// Once its keys are gone, the old season is read from PostgreSQL, not loaded again.
	ctx := context.Background()
	env.rdb.Del(ctx, env.rdb.Keys(ctx, env.prefix+":{season}:1:*").Val()...)
	if r := svc.do(t, http.MethodGet, "/v1/boards/season/top?period=1", player, ""); entryOrder(t, r) != "sia:3" {
		t.Errorf("the old season from PostgreSQL: %s", r.raw)
	}
	if keys := env.rdb.Keys(ctx, env.prefix+":{season}:1:*").Val(); len(keys) != 0 {
		t.Errorf("a season Redis no longer keeps was loaded into it: %v", keys)
	}
	if r := svc.do(t, http.MethodGet, "/v1/boards/season/users/sia", player, ""); num(r.body["score"]) != 8 || r.body["period"] != "2026-summer" {
		t.Errorf("the current season: %s", r.raw)
	}
	for _, c := range []struct {
		board, body, tok string
		status           int
		code             string
	}{
		{"season", `{"season": "2026-summer"}`, admin, 409, "season_exists"},
		{"season", `{"season": "1"}`, admin, 409, "season_exists"},
		{"season", `{"season": "a b"}`, admin, 400, "invalid_season"},
		{"daily", `{"season": "x"}`, admin, 400, "not_a_season_board"},
		{"nope", `{"season": "x"}`, admin, 404, "unknown_board"},
		{"season", `{"season": "x"}`, srv, 403, "forbidden"},
	} {
		if r := svc.do(t, http.MethodPost, "/admin/boards/"+c.board+"/seasons", c.tok, c.body); r.status != c.status || r.body["error_code"] != c.code {
			t.Errorf("start %s on %s: %d %s, want %d %s", c.body, c.board, r.status, r.raw, c.status, c.code)
		}
	}
	if n := env.count(`SELECT count(*) FROM admin_audit WHERE actor = 'ops-sam' AND action = 'board.season_start' AND target = 'season/2026-summer' AND reason = 'summer event'`); n != 1 {
		t.Errorf("%d audited season starts", n)
	}
	r = svc.do(t, http.MethodGet, "/v1/boards", player, "")
	for _, b := range r.body["boards"].([]any) {
		if m := b.(map[string]any); m["id"] == "season" && (m["current_period"] != "2026-summer" || m["previous_period"] != "1") {
			t.Errorf("season listed as %v", m)
		}
	}
}

// TestPastPeriods: Redis keeps a day for the retention window and lets its keys expire;
// a day whose keys are gone is loaded from PostgreSQL on its next read, and a day past the
// window is read from PostgreSQL; the client sees the same answer either way.
func TestPastPeriods(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clock := &testClock{}
	day := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	clock.set(day)
	svc := env.startWith(map[string]string{"LEADERBOARD_REDIS_PAST_PERIODS": "1"}, clock.now)
	srv, viewer := mintToken(t, "gs", "server"), mintToken(t, "viewer")
	for _, body := range []string{`{"value": 5, "user_id": "pa"}`, `{"value": 7, "user_id": "pb"}`} {
		if r := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, body); r.status != 200 {
			t.Fatalf("%s: %d %s", body, r.status, r.raw)
		}
	}
	read := func() string {
		t.Helper()
		r := svc.do(t, http.MethodGet, "/v1/boards/daily/top?period=2026-05-04", viewer, "")
		if r.status != 200 {
			t.Fatalf("read 2026-05-04: %d %s", r.status, r.raw)
		}
		return entryOrder(t, r) + " " + fmt.Sprint(svc.do(t, http.MethodGet, "/v1/boards/daily/users/pa?period=2026-05-04", viewer, "").body["rank"])
	}
	want := read()
	if want != "pb:7 pa:5 2" {
		t.Fatalf("the day: %s", want)
	}
	// Its keys live until the end of the retention window (the day, one more, an hour).
	ttl := env.rdb.PTTL(context.Background(), env.prefix+":{daily}:2026-05-04:z").Val()
	if until := time.Date(2026, 5, 6, 1, 0, 0, 0, time.UTC).Sub(day); ttl <= 0 || ttl > until || ttl < until-time.Minute {
		t.Fatalf("the day's keys live %v, want about %v", ttl, until)
	}
	// They expire (here: they are deleted) the next day: the next read loads them again.
	clock.set(day.Add(24 * time.Hour))
	keys := env.rdb.Keys(context.Background(), env.prefix+":{daily}:2026-05-04:*").Val()
	env.rdb.Del(context.Background(), keys...)
	if got := read(); got != want {
		t.Fatalf("after the keys expired: %s, want %s", got, want)
	}
	if env.rdb.Exists(context.Background(), env.prefix+":{daily}:2026-05-04:top").Val() != 1 {
		t.Fatal("the day was not loaded back into Redis")
	}
	// Past the window, reads come from PostgreSQL, and Redis is left alone.
	clock.set(day.Add(5 * 24 * time.Hour))
	env.rdb.Del(context.Background(), env.rdb.Keys(context.Background(), env.prefix+":{daily}:2026-05-04:*").Val()...)
	if got := read(); got != want {
		t.Fatalf("past the window: %s, want %s", got, want)
	}
	if n := len(env.rdb.Keys(context.Background(), env.prefix+":{daily}:2026-05-04:*").Val()); n != 0 {
		t.Fatalf("a day past the window was loaded into Redis (%d keys)", n)
	}
	// That read froze the closed day (in the background); reads then go through its rank
	// index, with the same answer. The open day's entries are not frozen.
	if r := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, `{"value": 3, "user_id": "pa"}`); r.status != 200 {
		t.Fatalf("a score today: %d %s", r.status, r.raw)
	}
	frozen := func(period string) (n, of int) {
		t.Helper()
		if err := env.db().QueryRow(context.Background(), `SELECT count(closed_sort_key), count(*) FROM board_entries WHERE board_id = 'daily' AND period = $1`,
			period).Scan(&n, &of); err != nil {
			t.Fatal(err)
		}
		return n, of
	}
	deadline := time.Now().Add(20 * time.Second)
	for n, of := frozen("2026-05-04"); n != of || of != 2; n, of = frozen("2026-05-04") {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the closed day's %d entries frozen 20 s after its read", n, of)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := read(); got != want {
		t.Fatalf("the closed day frozen: %s, want %s", got, want)
	}
	if n, of := frozen("2026-05-09"); n != 0 || of != 1 {
		t.Fatalf("%d of the open day's %d entries frozen, want none of 1", n, of)
	}
}
