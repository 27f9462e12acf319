package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCooldownSurvivesAClientThatHangsUp: a client that hangs up while its command waits
// for the outbox transaction does not get its action's cooldown back: the command is still
// committed and applied, and the action again inside the cooldown is 429. (The lock was
// given back on any error of Submit, the request context's included. Found by a review.)
func TestCooldownSurvivesAClientThatHangsUp(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	svc := env.start(vars)
	tok := mintToken(t, "hang")
	body := func(event string) string {
		return fmt.Sprintf(`{"user_id": "hang", "delta": 5, "event_id": %q, "timestamp": %q, "action_id": "quest-1"}`, event, time.Now().UTC().Format(time.RFC3339))
	}
	// Hold the outbox transaction back for a moment (as a slow commit would).
	ctx := context.Background()
	tx, err := env.db().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE score_requests IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, svc.base+"/v1/scores/increment", strings.NewReader(body("h-1")))
	req.Header.Set("Authorization", "Bearer "+tok)
	if resp, err := (&http.Client{Timeout: time.Second}).Do(req); err == nil { // the player hangs up
		resp.Body.Close()
		t.Fatalf("the write was answered %d while the outbox was held", resp.StatusCode)
	}
	time.Sleep(500 * time.Millisecond)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM score_history WHERE event_id = 'h-1'`); n != 1 {
			return "h-1 not applied"
		}
		return ""
	})
	// h-1 did the action: a second one inside the 30 s cooldown must be refused.
	r := svc.do(t, http.MethodPost, "/v1/scores/increment", tok, body("h-2"))
	if r.status != 429 || r.body["error_code"] != "cooldown_active" {
		t.Fatalf("the action again inside its cooldown, after an applied write of it: %d %s", r.status, r.raw)
	}
}
