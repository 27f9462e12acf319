package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/messages"
)

// Set boards ("the latest event wins") apply one user's commands in their commit order,
// as every board does, whatever the API's clocks said when they were accepted (found by a
// review of the failure promises: a later command was dropped, and ?wait=true answered
// "applied" with the earlier value).

// TestSetBoardTakesTheLaterCommandOnALaggingClock: the second of two writes is accepted
// by an API process whose clock reads earlier (another replica, or a clock stepped back);
// committed after the first, it is the entry's value.
func TestSetBoardTakesTheLaterCommandOnALaggingClock(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	file := filepath.Join(t.TempDir(), "boards.json")
	if err := os.WriteFile(file, []byte(readBoards), 0o600); err != nil {
		t.Fatal(err)
	}
	var lag atomic.Int64
	svc := env.startWith(map[string]string{"LEADERBOARD_BOARDS_FILE": file}, func() time.Time { return time.Now().Add(-time.Duration(lag.Load())) })
	srv := mintToken(t, "gs", "server")
	if r := svc.do(t, http.MethodPost, "/v1/boards/latest/scores?wait=true", srv, `{"value": 100, "user_id": "s1", "event_id": "first", "metadata": {"n": 1}}`); r.status != 200 || num(r.body["score"]) != 100 {
		t.Fatalf("first write: %d %s", r.status, r.raw)
	}
	first := svc.do(t, http.MethodGet, "/v1/boards/latest/users/s1", srv, "")
	lag.Store(int64(time.Hour)) // earlier than the first write, however slow the machine
	r := svc.do(t, http.MethodPost, "/v1/boards/latest/scores?wait=true", srv, `{"value": 50, "user_id": "s1", "event_id": "second", "metadata": {"n": 2}}`)
	if r.status != 200 || r.body["status"] != "applied" || num(r.body["score"]) != 50 {
		t.Fatalf("second write: %d %s, want applied with its value 50", r.status, r.raw)
	}
	got := svc.do(t, http.MethodGet, "/v1/boards/latest/users/s1", srv, "")
	if num(got.body["score"]) != 50 || fmt.Sprint(got.body["metadata"]) != "map[n:2]" {
		t.Errorf("after 100 then 50: %s, want 50 with the second write's metadata", got.raw)
	}
	// The entry's update time does not go back with the lagging clock.
	if got.body["updated_at"] != first.body["updated_at"] {
		t.Errorf("updated_at %v after the lagging write, want the first write's %v (never earlier)", got.body["updated_at"], first.body["updated_at"])
	}
}

// TestSetWriteCommittedAfterAnAdjustmentIsAppliedAfter: README's Order, on a set board: a
// write accepted before an admin's adjustment but committed after it is applied after it,
// so its value is the entry's.
func TestSetWriteCommittedAfterAnAdjustmentIsAppliedAfter(t *testing.T) {
	t.Parallel()
	env, svc := readBoardsEnv(t)
	srv, admin := mintToken(t, "gs", "server"), mintToken(t, "ops", "admin")
	writeAs(t, svc, "latest", "s1", 10)
	ctx := context.Background()
	// The write's request key is held by another transaction: the write is accepted (its
	// time taken) and waits to commit until the adjustment has.
	tx, err := env.db().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO score_requests (event_id, body_hash, user_id, board_id) VALUES ('w-late', '\x00', 's1', 'latest')`); err != nil {
		t.Fatal(err)
	}
	done := make(chan response, 1)
	go func() {
		done <- svc.do(t, http.MethodPost, "/v1/boards/latest/scores", srv, `{"value": 77, "user_id": "s1", "event_id": "w-late"}`)
	}()
	eventually(t, 20*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`); n == 0 {
			return "the write does not wait for its request key yet"
		}
		return ""
	})
	// Not ?wait=true: the relay forwards no row of a transaction younger than the one
	// holding the key (watermill-sql's rule) until that one ends.
	if r := svc.do(t, http.MethodPost, "/admin/boards/latest/entries/s1/adjust", admin, `{"value": 500, "reason": "fix", "event_id": "adj-1"}`); r.status != 202 {
		t.Fatalf("adjust: %d %s", r.status, r.raw)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.status != 202 {
		t.Fatalf("write: %d %s", r.status, r.raw)
	}
	eventually(t, 20*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 's1' AND event_id IN ('w-late', 'adj-1')`); n != 2 {
			return fmt.Sprintf("%d of the 2 commands applied", n)
		}
		return ""
	})
	var order string
	if err := env.db().QueryRow(ctx, `SELECT string_agg(event_id, ' ' ORDER BY applied_at) FROM score_history WHERE user_id = 's1' AND event_id IN ('w-late', 'adj-1')`).Scan(&order); err != nil || order != "adj-1 w-late" {
		t.Fatalf("applied in the order %q (%v), want the adjustment first: the test's premise", order, err)
	}
	eventually(t, 10*time.Second, func() string {
		if r := svc.do(t, http.MethodGet, "/v1/boards/latest/users/s1", srv, ""); num(r.body["score"]) != 77 {
			return fmt.Sprintf("the write committed after the adjustment: entry %s, want 77", r.raw)
		}
		return ""
	})
}

// TestRequeuedOldCommandTakesNoNewerValueBack: a dead letter an admin requeues may be older
// than the entry's last change. An old set changes nothing; an old increment adds its
// delta but leaves the newer metadata; a set accepted after the entry's last change
// applies as any write.
func TestRequeuedOldCommandTakesNoNewerValueBack(t *testing.T) {
	t.Parallel()
	env, svc := readBoardsEnv(t)
	srv, admin := mintToken(t, "gs", "server"), mintToken(t, "ops", "admin")
	ctx := context.Background()
	old := time.Now().Add(-time.Hour).UTC()
	letter := func(cmd messages.ScoreSubmitted) {
		t.Helper()
		payload, _ := json.Marshal(cmd)
		meta, _ := json.Marshal(map[string]string{"event_id": cmd.EventID, "partition_key": cmd.UserID})
		if _, err := env.db().Exec(ctx, `INSERT INTO dead_letters (uuid, event_id, user_id, payload, metadata, reason, topic, handler, subscriber)
			VALUES ($1, $1, $2, $3, $4, 'panic: handler bug', 'leaderboard.score-events', 'apply-score', 'kafka')`, cmd.EventID, cmd.UserID, payload, meta); err != nil {
			t.Fatal(err)
		}
	}
	letter(messages.ScoreSubmitted{EventID: "old-set", Board: "latest", Period: "all_time", UserID: "s1", Value: 40, OccurredAt: old})
	letter(messages.ScoreSubmitted{EventID: "old-incr", Board: "points", Period: "all_time", UserID: "p1", Value: 5, Metadata: json.RawMessage(`{"m": "old"}`), OccurredAt: old})
	if r := svc.do(t, http.MethodPost, "/v1/boards/latest/scores?wait=true", srv, `{"value": 100, "user_id": "s1"}`); r.status != 200 {
		t.Fatalf("set: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodPost, "/v1/boards/points/scores?wait=true", srv, `{"value": 10, "user_id": "p1", "metadata": {"m": "new"}}`); r.status != 200 {
		t.Fatalf("increment: %d %s", r.status, r.raw)
	}
	writeAs(t, svc, "latest", "s2", 30)
	letter(messages.ScoreSubmitted{EventID: "new-set", Board: "latest", Period: "all_time", UserID: "s2", Value: 60, OccurredAt: time.Now().UTC()})
	if r := svc.do(t, http.MethodPost, "/admin/dlq/requeue", admin, `{"reason_contains": "handler bug"}`); r.status != 200 || num(r.body["requeued"]) != 3 {
		t.Fatalf("requeue: %d %s", r.status, r.raw)
	}
	eventually(t, 20*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM score_history WHERE event_id IN ('old-set', 'old-incr', 'new-set')`); n != 3 {
			return fmt.Sprintf("%d of 3 requeued commands applied", n)
		}
		return ""
	})
	// PostgreSQL has them all (the history and the entries commit together) ...
	var state string
	if err := env.db().QueryRow(ctx, `SELECT string_agg(board_id || '/' || user_id || '=' || score || coalesce(metadata::text, ''), ' ' ORDER BY board_id, user_id)
		FROM board_entries WHERE user_id IN ('s1', 's2', 'p1')`).Scan(&state); err != nil || state != `latest/s1=100 latest/s2=60 points/p1=15{"m": "new"}` {
		t.Errorf("entries after the requeue: %q (%v), want latest/s1=100 latest/s2=60 points/p1=15{\"m\": \"new\"}", state, err)
	}
	// ... and Redis shows what PostgreSQL holds.
	for _, c := range []struct {
		path       string
		score      int64
		metadata   string
		whatRuleIs string
	}{
		{"/v1/boards/latest/users/s1", 100, "<nil>", "an old requeued set changes nothing"},
		{"/v1/boards/points/users/p1", 15, "map[m:new]", "an old requeued increment adds, the newer metadata stays"},
		{"/v1/boards/latest/users/s2", 60, "<nil>", "a requeued set accepted after the entry's last change applies"},
	} {
		eventually(t, 10*time.Second, func() string { // Redis follows PostgreSQL
			if r := svc.do(t, http.MethodGet, c.path, srv, ""); num(r.body["score"]) != c.score || fmt.Sprint(r.body["metadata"]) != c.metadata {
				return fmt.Sprintf("%s: %s, want score %d and metadata %s (%s)", c.path, r.raw, c.score, c.metadata, c.whatRuleIs)
			}
			return ""
		})
	}
}
