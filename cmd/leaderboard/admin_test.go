package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/openleaderboard/leaderboard/messages"
)

// TestDeadLetterAdmin: inspect, requeue (one and by filter) and delete dead letters as
// an admin; a requeued message that succeeds is applied, one that fails again comes back
// with more attempts; every action is audited; other tokens get 403.
func TestDeadLetterAdmin(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	svc := env.start(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker})
	admin := mintToken(t, "ops-alice", "admin")
	player := mintToken(t, "player", "server")
	ctx := context.Background()

	// A malformed message, dead-lettered by the projector.
	produceRaw(t, broker, "leaderboard.score-events", &sarama.ProducerMessage{Key: sarama.StringEncoder("x"), Value: sarama.ByteEncoder([]byte{0xff, 0x00, '{'})})
	eventually(t, 20*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM dead_letters`); n != 1 {
			return fmt.Sprintf("%d dead letters", n)
		}
		return ""
	})
	// A valid command dead-lettered by an earlier bug (since fixed): requeueing applies it.
	cmd, _ := json.Marshal(messages.ScoreSubmitted{EventID: "lost-1", Board: "global", Period: "all_time", UserID: "lucky", Value: 321, OccurredAt: time.Now().UTC()})
	meta, _ := json.Marshal(map[string]string{"event_id": "lost-1", "partition_key": "lucky", "reason_poisoned": "panic: handler bug"})
	if _, err := env.db().Exec(ctx, `INSERT INTO dead_letters (uuid, event_id, payload, metadata, reason, topic, handler, subscriber)
		VALUES ('lost-1', 'lost-1', $1, $2, 'panic: handler bug', 'leaderboard.score-events', 'apply-score', 'kafka')`, cmd, meta); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ method, path string }{
		{"GET", "/admin/dlq"}, {"GET", "/admin/dlq/1"}, {"POST", "/admin/dlq/1/requeue"}, {"DELETE", "/admin/dlq/1"}, {"POST", "/admin/dlq/requeue"},
	} {
		if r := svc.do(t, c.method, c.path, player, "{}"); r.status != 403 || r.body["error_code"] != "forbidden" {
			t.Errorf("%s %s with a non-admin token: %d %s", c.method, c.path, r.status, r.raw)
		}
		if r := svc.do(t, c.method, c.path, "", "{}"); r.status != 401 {
			t.Errorf("%s %s without a token: %d", c.method, c.path, r.status)
		}
	}

	page := svc.do(t, "GET", "/admin/dlq?limit=1", admin, "")
	items := page.body["items"].([]any)
	if page.status != 200 || len(items) != 1 || items[0].(map[string]any)["event_id"] != "lost-1" || page.body["next_cursor"] == nil {
		t.Fatalf("first page: %d %s", page.status, page.raw)
	}
	next := svc.do(t, "GET", "/admin/dlq?limit=1&cursor="+page.body["next_cursor"].(string), admin, "")
	broken := next.body["items"].([]any)[0].(map[string]any)
	if broken["topic"] != "leaderboard.score-events" || broken["handler"] != "apply-score" || num(broken["attempts"]) != 1 || next.body["next_cursor"] != nil ||
		broken["event_id"] != "" { // API.md lists event_id in every item: empty for a message without one
		t.Fatalf("second page: %s", next.raw)
	}
	brokenID := fmt.Sprint(num(broken["id"]))
	luckyID := fmt.Sprint(num(items[0].(map[string]any)["id"]))

	r := svc.do(t, "GET", "/admin/dlq/"+brokenID, admin, "")
	payload := r.body["payload"].(map[string]any)
	if payload["base64"] != "/wB7" || payload["text"] != nil || payload["json"] != nil || !hasText(r.body["reason"]) {
		t.Fatalf("malformed payload shown as %s", r.raw)
	}
	r = svc.do(t, "GET", "/admin/dlq/"+luckyID, admin, "")
	if p := r.body["payload"].(map[string]any); p["json"].(map[string]any)["user_id"] != "lucky" || r.body["metadata"].(map[string]any)["partition_key"] != "lucky" {
		t.Fatalf("valid payload shown as %s", r.raw)
	}
	for _, c := range []struct {
		method, path string
		status       int
	}{{"GET", "/admin/dlq/abc", 404}, {"GET", "/admin/dlq/-4", 404}, {"GET", "/admin/dlq/0", 400}, {"GET", "/admin/dlq/99999999999999999999", 400}, {"GET", "/admin/dlq/999999", 404},
		{"POST", "/admin/dlq/999999/requeue", 404}, {"DELETE", "/admin/dlq/999999", 404}, {"GET", "/admin/dlq?cursor=x", 400}} {
		if r := svc.do(t, c.method, c.path, admin, ""); r.status != c.status {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, r.status, r.raw, c.status)
		}
	}

	// Requeue the valid one: applied, and gone from the dead letters.
	if r := svc.do(t, "POST", "/admin/dlq/"+luckyID+"/requeue", admin, ""); r.status != 200 || r.body["status"] != "requeued" {
		t.Fatalf("requeue: %d %s", r.status, r.raw)
	}
	eventually(t, 20*time.Second, func() string {
		r := svc.do(t, "GET", "/v1/leaderboard/users/lucky", admin, "")
		if r.status != 200 || num(r.body["score"]) != 321 {
			return r.raw
		}
		return ""
	})
	// Requeue the malformed one: it fails again and comes back with 2 attempts.
	if r := svc.do(t, "POST", "/admin/dlq/"+brokenID+"/requeue", admin, ""); r.status != 200 {
		t.Fatalf("requeue broken: %d %s", r.status, r.raw)
	}
	attempts := func(want int) {
		eventually(t, 20*time.Second, func() string {
			if n := env.count(`SELECT count(*) FROM dead_letters WHERE attempts = $1`, want); n != 1 || env.count(`SELECT count(*) FROM dead_letters`) != 1 {
				return fmt.Sprintf("no single dead letter with %d attempts", want)
			}
			return ""
		})
	}
	attempts(2)
	// Bulk requeue by topic and reason: back again with 3 attempts.
	r = svc.do(t, "POST", "/admin/dlq/requeue", admin, `{"topic": "leaderboard.score-events", "reason_contains": "decode ScoreSubmitted"}`)
	if r.status != 200 || num(r.body["requeued"]) != 1 {
		t.Fatalf("bulk requeue: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, "POST", "/admin/dlq/requeue", admin, `{"reason_contains": "no such reason"}`); r.status != 200 || r.body["requeued"] != float64(0) {
		t.Fatalf("bulk requeue matched nothing but said %s", r.raw)
	}
	attempts(3)
	var lastID int64
	_ = env.db().QueryRow(ctx, `SELECT id FROM dead_letters`).Scan(&lastID)
	if r := svc.do(t, "DELETE", fmt.Sprintf("/admin/dlq/%d", lastID), admin, ""); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	if n := env.count(`SELECT count(*) FROM dead_letters`); n != 0 {
		t.Fatalf("%d dead letters after delete", n)
	}
	if n := env.count(`SELECT count(*) FROM admin_audit WHERE actor = 'ops-alice'`); n != 4 {
		t.Fatalf("%d audited actions, want 4 (requeue, requeue, bulk requeue, delete)", n)
	}
	if n := env.count(`SELECT count(*) FROM admin_audit WHERE action = 'dlq.requeue_matching' AND detail->>'reason_contains' = 'decode ScoreSubmitted'`); n != 1 {
		t.Fatalf("bulk requeue not audited with its filter")
	}
}

// TestConcurrentSeasonStartsChain: admins start several seasons of one board at
// once (different names). Each 201 names the season it replaced (previous_season); the
// seasons then form one chain from season 1, and its last is the current season (every
// answer named season 1, and a start whose transaction began first but committed last
// was never current; found by a review of operators' endpoints).
func TestConcurrentSeasonStartsChain(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	admin := mintToken(t, "ops", "admin")
	const n = 8
	type started struct{ season, previous string }
	var mu sync.Mutex
	var got []started
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("s%d", i+2)
			r := svc.do(t, http.MethodPost, "/admin/boards/season/seasons", admin, `{"season": "`+name+`"}`)
			if r.status != http.StatusCreated {
				t.Errorf("start %s: %d %s", name, r.status, r.raw)
				return
			}
			mu.Lock()
			got = append(got, started{name, fmt.Sprint(r.body["previous_season"])})
			mu.Unlock()
		}()
	}
	wg.Wait()
	prevs := map[string][]string{}
	for _, s := range got {
		prevs[s.previous] = append(prevs[s.previous], s.season)
	}
	for p, ss := range prevs {
		if len(ss) > 1 {
			sort.Strings(ss)
			t.Errorf("seasons %v were each answered 201 as replacing season %q: only one of them did", ss, p)
		}
	}
	last, chained := "1", 0
	for len(prevs[last]) == 1 {
		last, chained = prevs[last][0], chained+1
	}
	r := svc.do(t, http.MethodGet, "/v1/boards", admin, "")
	current := ""
	for _, b := range r.body["boards"].([]any) {
		if m := b.(map[string]any); m["id"] == "season" {
			current, _ = m["current_period"].(string)
		}
	}
	if chained != n || current != last {
		t.Errorf("the answers chain %d of %d seasons from season 1, to %q; the current season is %q", chained, n, last, current)
	}
}

// TestDeadLetterDeleteAuditNamesWhatWasDropped: an admin deletes the dead letter of
// a player's valid score command. The dead letter, payload and all, is gone; the audit
// trail is then the only record of the action, and must say which command (event id) of
// which user was dropped, not only the dead letter's now meaningless id (it said only
// that; found by a review of operators' endpoints).
func TestDeadLetterDeleteAuditNamesWhatWasDropped(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	admin := mintToken(t, "ops-bob", "admin")
	ctx := context.Background()
	cmd, _ := json.Marshal(messages.ScoreSubmitted{EventID: "drop-ev-1", Board: "global", Period: "all_time", UserID: "victim-7", Value: 321, OccurredAt: time.Now().UTC()})
	meta, _ := json.Marshal(map[string]string{"event_id": "drop-ev-1", "partition_key": "victim-7"})
	var id int64
	if err := env.db().QueryRow(ctx, `INSERT INTO dead_letters (uuid, event_id, user_id, payload, metadata, reason, topic, handler, subscriber)
		VALUES ('drop-ev-1', 'drop-ev-1', 'victim-7', $1, $2, 'panic: handler bug', 'leaderboard.score-events', 'apply-score', 'kafka') RETURNING id`, cmd, meta).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if r := svc.do(t, http.MethodDelete, fmt.Sprintf("/admin/dlq/%d", id), admin, ""); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	r := svc.do(t, http.MethodGet, "/admin/audit", admin, "")
	if r.status != 200 {
		t.Fatalf("audit: %d %s", r.status, r.raw)
	}
	items, _ := r.body["items"].([]any)
	if len(items) == 0 {
		t.Fatalf("no audit record of the delete: %s", r.raw)
	}
	rec, _ := json.Marshal(items[0])
	if !strings.Contains(string(rec), "drop-ev-1") || !strings.Contains(string(rec), "victim-7") {
		t.Errorf("the audit record of a dead letter's delete does not name the dropped command's event id and user: %s", rec)
	}
}
