package main

import (
	"context"
	"encoding/json"
	"fmt"
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
