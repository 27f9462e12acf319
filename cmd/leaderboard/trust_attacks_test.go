package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Attacks a review found on the trust features (2026-11-26), each from a player's token.

// TestSignedBoardTakesNoUnsignedPlayerWrites: with LEADERBOARD_SIGNING_SECRET set, a
// player cannot increment the points board without a signature through the generic write
// either (401 invalid_signature, recorded as the player's anomaly, nothing applied); a game
// server's token still can.
func TestSignedBoardTakesNoUnsignedPlayerWrites(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	vars["LEADERBOARD_SIGNING_SECRET"] = signingSecret
	svc := env.start(vars)
	tok, srv, admin := mintToken(t, "nosig"), mintToken(t, "game-server", "server"), mintToken(t, "ops", "admin")
	ts := time.Now().UTC().Format(time.RFC3339)
	if r := svc.do(t, http.MethodPost, "/v1/scores/increment", tok,
		fmt.Sprintf(`{"user_id": "nosig", "delta": 100, "event_id": "ns-1", "timestamp": %q}`, ts)); r.status != 401 {
		t.Fatalf("unsigned increment: %d %s", r.status, r.raw)
	}
	r := svc.do(t, http.MethodPost, "/v1/boards/points/scores?wait=true", tok, `{"value": 100, "event_id": "ns-2"}`)
	if r.status != 401 || r.body["error_code"] != "invalid_signature" {
		t.Fatalf("an unsigned player increment of points through /v1/boards/points/scores: %d %s, want 401 invalid_signature", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodPost, "/v1/boards/points/scores?wait=true", srv, `{"value": 7, "user_id": "nosig", "event_id": "ns-3"}`); r.status != 200 || num(r.body["score"]) != 7 {
		t.Fatalf("a game server's write of points: %d %s", r.status, r.raw)
	}
	eventually(t, 10*time.Second, func() string {
		r := svc.do(t, http.MethodGet, "/admin/anomalies?user_id=nosig&reason=invalid_signature", admin, "")
		if items, _ := r.body["items"].([]any); len(items) != 2 {
			return fmt.Sprintf("anomalies: %s, want the 2 refusals", r.raw)
		}
		return ""
	})
}

// TestCooldownKeptWhenItsEventIsReusedWithAnotherBody: the write holding an action's
// cooldown is sent again with the same event id and another delta (409); the lock stays
// the accepted write's, so the next increment of the action inside the cooldown is 429.
// (The conflict used to give the accepted write's lock back.)
func TestCooldownKeptWhenItsEventIsReusedWithAnotherBody(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t) // points: action_cooldown 30 s
	clock := &testClock{}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock.set(now)
	svc := env.startWith(vars, clock.now)
	tok := mintToken(t, "cdx")
	inc := func(event string, delta int) response {
		t.Helper()
		return svc.do(t, http.MethodPost, "/v1/scores/increment", tok, fmt.Sprintf(`{"user_id": "cdx", "delta": %d, "event_id": %q, "timestamp": %q, "action_id": "daily-quest"}`,
			delta, event, clock.now().Format(time.RFC3339)))
	}
	if r := inc("q-1", 5); r.status != 202 {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	clock.set(now.Add(5 * time.Second))
	if r := inc("q-1", 5); r.status != 202 { // a retry of the holder passes
		t.Fatalf("retry: %d %s", r.status, r.raw)
	}
	if r := inc("q-1", 6); r.status != 409 { // the holder's event id, another body
		t.Fatalf("conflict: %d %s", r.status, r.raw)
	}
	if r := inc("q-2", 5); r.status != 429 || r.body["error_code"] != "cooldown_active" {
		t.Fatalf("inside the 30 s cooldown a new increment of the action: %d %s, want 429 cooldown_active", r.status, r.raw)
	}
	clock.set(now.Add(31 * time.Second))
	if r := inc("q-2", 5); r.status != 202 {
		t.Fatalf("after the cooldown: %d %s", r.status, r.raw)
	}
}

// TestRefusalsAreRecordedForTheirOwnUser: a player's refused writes are recorded as its
// own anomalies: an unsigned increment naming another user is refused for naming it (403),
// before its signature is looked at, and nothing is recorded for the user it named.
func TestRefusalsAreRecordedForTheirOwnUser(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	vars["LEADERBOARD_SIGNING_SECRET"] = signingSecret
	svc := env.start(vars)
	mallory, admin := mintToken(t, "mallory"), mintToken(t, "ops", "admin")
	ts := time.Now().UTC().Format(time.RFC3339)
	for i := range 3 {
		r := svc.do(t, http.MethodPost, "/v1/scores/increment", mallory,
			fmt.Sprintf(`{"user_id": "victim", "delta": 100, "event_id": "fr-%d", "timestamp": %q, "signature": "00"}`, i, ts))
		if r.status != 403 {
			t.Fatalf("write %d naming another user: %d %s, want 403", i, r.status, r.raw)
		}
	}
	if r := svc.do(t, http.MethodPost, "/v1/scores/increment", mallory,
		fmt.Sprintf(`{"user_id": "mallory", "delta": 100, "event_id": "fr-9", "timestamp": %q, "signature": "00"}`, ts)); r.status != 401 {
		t.Fatalf("a wrong signature: %d %s", r.status, r.raw)
	}
	eventually(t, 10*time.Second, func() string {
		r := svc.do(t, http.MethodGet, "/admin/anomalies?user_id=mallory", admin, "")
		if items, _ := r.body["items"].([]any); len(items) != 1 {
			return fmt.Sprintf("mallory's anomalies: %s, want the one refused signature", r.raw)
		}
		return ""
	})
	r := svc.do(t, http.MethodGet, "/admin/anomalies?user_id=victim", admin, "")
	if items, _ := r.body["items"].([]any); len(items) > 0 {
		t.Fatalf("mallory's requests are recorded as %d anomalies of user victim: %s", len(items), r.raw)
	}
}

// TestMetadataJSONBRefusesIsRefused: metadata that is a JSON object under 1 KB but that
// PostgreSQL's jsonb refuses (or writes out far past 1 KB) is 400 invalid_metadata at the
// API; accepted (202), it was dead-lettered, never applied.
func TestMetadataJSONBRefusesIsRefused(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	svc := env.start(vars)
	tok := mintToken(t, "nul")
	for i, meta := range []string{`{"x": "\u0000"}`, `{"x": "\ud800"}`, `{"x": 1e131071}`, "{\"x\": \"\xff\"}"} {
		r := svc.do(t, http.MethodPost, "/v1/boards/arena/scores", tok, fmt.Sprintf(`{"value": 10, "event_id": "nul-%d", "metadata": %s}`, i, meta))
		if r.status != 400 || r.body["error_code"] != "invalid_metadata" {
			t.Errorf("metadata %q: %d %s, want 400 invalid_metadata", meta, r.status, r.raw)
		}
	}
	if n := env.count(`SELECT count(*) FROM score_requests`); n != 0 {
		t.Errorf("%d refused writes were recorded as accepted", n)
	}
}

// TestMetadataTheAPITakesIsApplied: metadata of 1 KB as the client sent it, made of the
// characters json.Marshal escapes ('&', '<', '>', U+2028), is applied and read back as sent.
// Before, the command went on to the projector at up to six times that size and was
// dead-lettered after its 202: a retry was answered 202 forever, and any player could fill
// the dead letters.
func TestMetadataTheAPITakesIsApplied(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	svc := env.start(vars)
	tok, admin := mintToken(t, "amp"), mintToken(t, "ops", "admin")
	for i, fill := range []string{"&", "<>", "\u2028", "Rock & Roll"} {
		head := `{"track":"`
		md := head + strings.Repeat(fill, (1024-len(head)-2)/len(fill))
		md += strings.Repeat("y", 1024-len(md)-2) + `"}`
		body := fmt.Sprintf(`{"value": %d, "event_id": "amp-%d", "metadata": %s}`, 100+i, i, md)
		if r := svc.do(t, http.MethodPost, "/v1/boards/global/scores?wait=true", tok, body); r.status != 200 || r.body["status"] != "applied" {
			t.Fatalf("1 KB of %q: %d %s, want 200 applied", fill, r.status, r.raw)
		}
		u := svc.do(t, http.MethodGet, "/v1/boards/global/users/amp", tok, "")
		var want any
		if err := json.Unmarshal([]byte(md), &want); err != nil {
			t.Fatal(err)
		}
		if u.status != 200 || !reflect.DeepEqual(u.body["metadata"], want) {
			t.Errorf("1 KB of %q: the entry reads %d %.200s, want its metadata as sent", fill, u.status, u.raw)
		}
	}
	if r := svc.do(t, http.MethodGet, "/admin/dlq", admin, ""); r.status != 200 || len(r.body["items"].([]any)) != 0 {
		t.Errorf("dead letters: %d %.300s, want none", r.status, r.raw)
	}
}

// TestAnomaliesPerUserAMinute: one user's refusals are recorded up to 20 a minute (the rest
// counted only), so that a player sending refused writes, which spend no rate limit, cannot
// push the others' out of the newest kept; another user's refusal is still recorded, and
// the player's again in the next minute.
func TestAnomaliesPerUserAMinute(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t)
	clock := &testClock{}
	now := time.Date(2026, 11, 23, 12, 0, 10, 0, time.UTC)
	clock.set(now)
	svc := env.startWith(vars, clock.now)
	flood, other, admin := mintToken(t, "flood"), mintToken(t, "other"), mintToken(t, "ops", "admin")
	for i := range 30 {
		if r := svc.do(t, http.MethodPost, "/v1/boards/arena/scores", flood, fmt.Sprintf(`{"value": %d}`, 5000+i)); r.status != 400 {
			t.Fatalf("out of range: %d %s", r.status, r.raw)
		}
	}
	if r := svc.do(t, http.MethodPost, "/v1/boards/arena/scores", other, `{"value": 5000}`); r.status != 400 {
		t.Fatalf("out of range: %d %s", r.status, r.raw)
	}
	clock.set(now.Add(time.Minute))
	if r := svc.do(t, http.MethodPost, "/v1/boards/arena/scores", flood, `{"value": 6000}`); r.status != 400 {
		t.Fatalf("out of range: %d %s", r.status, r.raw)
	}
	count := func(user string) int {
		r := svc.do(t, http.MethodGet, "/admin/anomalies?limit=100&user_id="+user, admin, "")
		items, _ := r.body["items"].([]any)
		return len(items)
	}
	eventually(t, 10*time.Second, func() string {
		if f, o := count("flood"), count("other"); f != 21 || o != 1 {
			return fmt.Sprintf("recorded: flood %d, other %d; want 21 (20 in the first minute, 1 in the next) and 1", f, o)
		}
		return ""
	})
}

// apiAndPipeline starts an API process and a relay and projector process, whose embedded
// broker the API uses: a test stops the pipeline (pipeline.stop) while the API goes on,
// and restartPipeline starts it again on the same broker data.
func apiAndPipeline(t *testing.T, env *testEnv) (api, pipeline *service, restartPipeline func()) {
	t.Helper()
	broker := "127.0.0.1:" + freePort(t)
	vars := map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker, "LEADERBOARD_ROLES": "relay,projector"}
	pipeline = env.start(vars)
	api = env.start(map[string]string{"LEADERBOARD_KAFKA_BROKERS": broker, "LEADERBOARD_ROLES": "api", "LEADERBOARD_HTTP_ADDR": "127.0.0.1:" + freePort(t)})
	return api, pipeline, func() {
		vars["LEADERBOARD_HTTP_ADDR"] = "127.0.0.1:" + freePort(t)
		env.start(vars)
	}
}

// TestScoreAfterAdminCommandIsNotAnsweredUnchanged: an admin removed one user's entry and
// adjusted another's down while the projector was away; Redis still shows both entries.
// A lower best score each user sends next is not answered "unchanged" against those (and
// dropped): it is accepted, and applied after the admin's command, so it becomes the
// user's entry. Once Redis shows the commands, the shortcut answers again.
func TestScoreAfterAdminCommandIsNotAnsweredUnchanged(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	api, pipeline, restartPipeline := apiAndPipeline(t, env)
	bob, carol, admin := mintToken(t, "bob"), mintToken(t, "carol"), mintToken(t, "ops", "admin")
	for _, w := range []struct {
		tok   string
		score int
	}{{bob, 5000}, {carol, 4000}} {
		if r := api.do(t, http.MethodPost, "/v1/scores?wait=true", w.tok, fmt.Sprintf(`{"score": %d}`, w.score)); r.status != 200 {
			t.Fatalf("seed: %d %s", r.status, r.raw)
		}
	}
	pipeline.stop(t)
	if r := api.do(t, http.MethodDelete, "/admin/boards/global/entries/bob?reason=cheating", admin, ""); r.status != 202 {
		t.Fatalf("remove: %d %s", r.status, r.raw)
	}
	if r := api.do(t, http.MethodPost, "/admin/boards/global/entries/carol/adjust", admin, `{"value": 1000, "reason": "glitch"}`); r.status != 202 {
		t.Fatalf("adjust: %d %s", r.status, r.raw)
	}
	if r := api.do(t, http.MethodPost, "/v1/scores", bob, `{"score": 3000}`); r.status != 202 {
		t.Errorf("bob's 3000 after the removal of his 5000: %d %s, want 202 accepted", r.status, r.raw)
	}
	if r := api.do(t, http.MethodPost, "/v1/scores", carol, `{"score": 2000}`); r.status != 202 {
		t.Errorf("carol's 2000 after her 4000 was adjusted to 1000: %d %s, want 202 accepted", r.status, r.raw)
	}
	restartPipeline()
	eventually(t, 30*time.Second, func() string {
		for user, want := range map[string]int64{"bob": 3000, "carol": 2000} {
			if r := api.do(t, http.MethodGet, "/v1/leaderboard/users/"+user, admin, ""); r.status != 200 || num(r.body["score"]) != want {
				return fmt.Sprintf("%s: %d %s, want %v", user, r.status, r.raw, want)
			}
		}
		return ""
	})
	eventually(t, 10*time.Second, func() string {
		if r := api.do(t, http.MethodPost, "/v1/scores", bob, `{"score": 2500}`); r.status != 200 || r.body["status"] != "unchanged" || num(r.body["score"]) != 3000 {
			return fmt.Sprintf("bob's 2500 once Redis shows the removal: %d %s, want 200 unchanged at 3000", r.status, r.raw)
		}
		return ""
	})
}

// TestAdminHoldSurvivesRedisLoss: an admin's adjustment on its way holds its entry (the
// write path does not answer "unchanged" against the value before it); Redis losing the
// board while the command waits lost the hold with it, and the next read loaded the entry
// from before the adjustment, against which a lower best score was answered unchanged and
// dropped (the entry ended at the adjustment's 100, not the 500 sent after it). The load
// holds the user again. Found by an outage test.
func TestAdminHoldSurvivesRedisLoss(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	api, pipeline, restartPipeline := apiAndPipeline(t, env)
	hx, admin := mintToken(t, "hx"), mintToken(t, "ops", "admin")
	if r := api.do(t, http.MethodPost, "/v1/scores?wait=true", hx, `{"score": 1000}`); r.status != 200 {
		t.Fatalf("seed: %d %s", r.status, r.raw)
	}
	pipeline.stop(t)
	if r := api.do(t, http.MethodPost, "/admin/boards/global/entries/hx/adjust", admin, `{"value": 100, "reason": "glitch"}`); r.status != 202 {
		t.Fatalf("adjust: %d %s", r.status, r.raw)
	}
	ctx := context.Background()
	lost := env.rdb.Keys(ctx, env.prefix+":{global}:*").Val()
	if len(lost) == 0 {
		t.Fatal("no Redis keys of the board to lose")
	}
	env.rdb.Del(ctx, lost...)
	if r := api.do(t, http.MethodGet, "/v1/leaderboard/users/hx", hx, ""); r.status != 200 || num(r.body["score"]) != 1000 {
		t.Fatalf("the read that loads the board again: %d %s, want 1000 (the adjustment is not applied yet)", r.status, r.raw)
	}
	if r := api.do(t, http.MethodPost, "/v1/scores", hx, `{"score": 500, "event_id": "after-adjust"}`); r.status != 202 {
		t.Errorf("hx's 500 after the adjustment to 100, Redis lost and loaded again: %d %s, want 202 accepted", r.status, r.raw)
	}
	restartPipeline()
	eventually(t, 30*time.Second, func() string {
		if r := api.do(t, http.MethodGet, "/v1/leaderboard/users/hx", hx, ""); r.status != 200 || num(r.body["score"]) != 500 {
			return fmt.Sprintf("hx once the pipeline is back: %d %s, want 500", r.status, r.raw)
		}
		return ""
	})
}

// A write body is read by encoding/json, which matches member names without
// regard to case and folds Unicode (U+017F "ſ" is "s", U+212A "K" is "k"), and lets a
// repeated member override the first. A strict intermediary (a game server relaying a
// client's body, a WAF, an anti-cheat or audit log that parses JSON exactly or keeps the
// first member) and this service then read two different scores from one body: the
// intermediary sees {"score": 5}, the service applies 9000. API.md and the decoder's own
// doc say unknown fields are errors.

// TestFoldedMemberNamesAreUnknownFields: "Score" and "ſcore" are not "score".
func TestFoldedMemberNamesAreUnknownFields(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	tok := mintToken(t, "folder")
	for _, body := range []string{
		`{"score": 5, "Score": 9000}`,
		`{"score": 5, "ſcore": 9000}`,
		`{"ſcore": 9000}`,
		`{"SCORE": 9000}`,
	} {
		r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", tok, body)
		if r.status != http.StatusBadRequest || r.body["error_code"] != "unknown_field" {
			t.Errorf("POST /v1/scores %s: %d %s, want 400 unknown_field", body, r.status, r.raw)
		}
	}
	// The same holds for the signed increment's members and the generic write's.
	r := svc.do(t, http.MethodPost, "/v1/boards/global/scores", tok, `{"vaLue": 9000}`)
	if r.status != http.StatusBadRequest || r.body["error_code"] != "unknown_field" {
		t.Errorf(`POST /v1/boards/global/scores {"vaLue": 9000}: %d %s, want 400 unknown_field`, r.status, r.raw)
	}
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/folder", tok, ""); r.status != http.StatusNotFound {
		t.Errorf("after refused writes the user has an entry: %d %s", r.status, r.raw)
	}
}

// TestDuplicateMembersAreRefused: a body naming a member twice is ambiguous (a
// first-wins parser and this last-wins one disagree on the score): 400.
func TestDuplicateMembersAreRefused(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	tok := mintToken(t, "dup")
	for _, c := range []struct{ path, body string }{
		{"/v1/scores", `{"score": 5, "score": 9000}`},
		{"/v1/boards/global/scores", `{"value": 5, "value": 9000}`},
		{"/v1/scores", `{"score": 5, "event_id": "d-1", "event_id": "d-2"}`},
	} {
		r := svc.do(t, http.MethodPost, c.path, tok, c.body)
		if r.status != http.StatusBadRequest || r.body["error_code"] != "invalid_json" {
			t.Errorf("POST %s %s: %d %s, want 400 invalid_json", c.path, c.body, r.status, r.raw)
		}
	}
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/dup", tok, ""); r.status != http.StatusNotFound {
		t.Errorf("after refused writes the user has an entry: %d %s", r.status, r.raw)
	}
}

// TestWaitsPerUserAreBounded: a retry is not rate limited, and a ?wait=true write polls
// PostgreSQL until it is applied. While the pipeline is away, a player's waited retries of
// one write past four at once are answered 202 without waiting, so they cannot each poll
// PostgreSQL for the whole wait timeout; another user's wait is not refused for them, and
// the write is applied once the pipeline is back.
func TestWaitsPerUserAreBounded(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	api, pipeline, restartPipeline := apiAndPipeline(t, env)
	bob, carol := mintToken(t, "bob"), mintToken(t, "carol")
	pipeline.stop(t)
	if r := api.submit(t, bob, `{"score": 700, "event_id": "w-1"}`); r.status != 202 {
		t.Fatalf("write: %d %s", r.status, r.raw)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waited := make(chan int, 8)
	wait := func(tok, body string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.base+"/v1/scores?wait=true", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			waited <- 0
			return
		}
		resp.Body.Close()
		waited <- resp.StatusCode
	}
	waitsAre := func(n float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for scrape(t, api)["leaderboard_write_waits"] != n {
			if time.Now().After(deadline) {
				t.Fatalf("leaderboard_write_waits %v, want %v", scrape(t, api)["leaderboard_write_waits"], n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for range 4 {
		go wait(bob, `{"score": 700, "event_id": "w-1"}`)
	}
	waitsAre(4)
	client := http.Client{Timeout: 10 * time.Second} // the waits' timeout is 30 s
	req, _ := http.NewRequest(http.MethodPost, api.base+"/v1/scores?wait=true", strings.NewReader(`{"score": 700, "event_id": "w-1"}`))
	req.Header.Set("Authorization", "Bearer "+bob)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("bob's fifth waited retry did not answer at once: %v", err)
	}
	var body struct{ Status string }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 202 || body.Status != "accepted" {
		t.Fatalf("bob's fifth waited retry: %d %q, want 202 accepted", resp.StatusCode, body.Status)
	}
	go wait(carol, `{"score": 300, "event_id": "c-1"}`)
	waitsAre(5) // carol waits although bob has four
	cancel()
	for range 5 {
		if s := <-waited; s != 0 {
			t.Errorf("a wait answered %d before the pipeline was back, want none", s)
		}
	}
	waitsAre(0)
	restartPipeline()
	for _, w := range []struct{ tok, body string }{{bob, `{"score": 700, "event_id": "w-1"}`}, {carol, `{"score": 300, "event_id": "c-1"}`}} {
		if r := api.do(t, http.MethodPost, "/v1/scores?wait=true", w.tok, w.body); r.status != 200 || r.body["status"] != "applied" {
			t.Errorf("waited retry after the pipeline is back: %d %s, want 200 applied", r.status, r.raw)
		}
	}
}

// TestConcurrentCopiesKeepTheCooldown: a game server sends copies of one claim (same
// event id and action_id) at once, as overlapping retries do. One copy takes the action's
// lock, the others pass it as retries; when the outbox accepts another copy than the one
// that took the lock, that one is answered as a duplicate, and it must not give back the
// lock its accepted sibling claims: a new claim of the action inside the cooldown is
// still 429, and each claim is applied once. (Found racing: 1 to 5 rounds of 10 let the
// second claim through.) Copies of a claim whose cooldown had ended, all answered as
// duplicates, leave the action free: the next claim is accepted.
func TestConcurrentCopiesKeepTheCooldown(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t) // points: action_cooldown 30 s, max_delta 100
	clock := &testClock{}
	clock.set(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)) // it stands still: every lock holds
	svc := env.startWith(vars, clock.now)
	tok := mintToken(t, "game-server", "server")
	inc := func(event, action string) response {
		return svc.do(t, http.MethodPost, "/v1/scores/increment", tok, fmt.Sprintf(
			`{"user_id": "racer", "delta": 100, "event_id": %q, "timestamp": "2026-11-23T12:00:00Z", "action_id": %q}`, event, action))
	}
	const rounds, copies = 10, 8
	sendCopies := func(round int, claim, action string) { // at once; each is accepted
		answers := make(chan response, copies)
		for range copies {
			go func() { answers <- inc(claim, action) }()
		}
		for range copies {
			if r := <-answers; r.status != 202 {
				t.Errorf("round %d: a copy of %s answered %d %s", round, claim, r.status, r.raw)
			}
		}
	}
	for round := range rounds {
		action, claim := fmt.Sprintf("chest-%d", round), fmt.Sprintf("r%d-claim", round)
		sendCopies(round, claim, action)
		if r := inc(fmt.Sprintf("r%d-again", round), action); r.status != 429 || r.body["error_code"] != "cooldown_active" {
			t.Errorf("round %d: a second claim of %s inside its cooldown: %d %s, want 429 cooldown_active", round, action, r.status, r.raw)
		}
	}
	// Copies of an old claim, its cooldown over: they take the lock again and give it back.
	clock.set(time.Date(2026, 11, 23, 12, 0, 31, 0, time.UTC))
	for round := range 3 {
		action := fmt.Sprintf("chest-%d", round)
		sendCopies(round, fmt.Sprintf("r%d-claim", round), action)
		if r := inc(fmt.Sprintf("r%d-next", round), action); r.status != 202 {
			t.Errorf("round %d: a new claim after copies of an old one whose cooldown ended: %d %s, want 202", round, r.status, r.raw)
		}
	}
	eventually(t, 30*time.Second, func() string { // each claim once
		if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 'racer'`); n != rounds+3 {
			return fmt.Sprintf("%d claims applied, want %d", n, rounds+3)
		}
		return ""
	})
}

// TestConflictingCopyGivesItsLockBack: two writes under one event id sent at once, with
// other values and actions: the one answered 409 gives back the lock of its action (no
// claim of it was accepted), the accepted one keeps its own.
func TestConflictingCopyGivesItsLockBack(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t) // points: action_cooldown 30 s
	clock := &testClock{}
	clock.set(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	svc := env.startWith(vars, clock.now)
	tok := mintToken(t, "game-server", "server")
	inc := func(event, action string, delta int) response {
		return svc.do(t, http.MethodPost, "/v1/scores/increment", tok, fmt.Sprintf(
			`{"user_id": "racer", "delta": %d, "event_id": %q, "timestamp": "2026-11-23T12:00:00Z", "action_id": %q}`, delta, event, action))
	}
	for round := range 5 {
		event := fmt.Sprintf("c%d", round)
		actions := []string{fmt.Sprintf("x-%d", round), fmt.Sprintf("y-%d", round)}
		answers := make(chan int, 2)
		for i, action := range actions {
			go func() { answers <- 10*(i+1) + 1000*inc(event, action, 10*(i+1)).status }()
		}
		won := ""
		for range 2 {
			a := <-answers
			switch a / 1000 {
			case 202:
				won = actions[a%1000/10-1]
			case 409:
			default:
				t.Fatalf("round %d: answered %d", round, a/1000)
			}
		}
		for _, action := range actions {
			want := 202
			if action == won {
				want = 429
			}
			if r := inc(event+"-"+action, action, 1); r.status != want {
				t.Errorf("round %d: a new claim of %s (the accepted write's: %s): %d %s, want %d", round, action, won, r.status, r.raw, want)
			}
		}
	}
}

// TestRetryPassesACooldownTakenSince: an exact retry of an accepted claim, sent after the
// action's cooldown ended and another claim took the lock again, is answered as the first
// time (not 429 cooldown_active), spends none of the rate limit and is recorded as no
// anomaly.
func TestRetryPassesACooldownTakenSince(t *testing.T) {
	t.Parallel()
	env, vars := trustEnv(t) // points: action_cooldown 30 s
	vars["LEADERBOARD_RATE_LIMIT"] = "4/600s"
	clock := &testClock{}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock.set(now)
	svc := env.startWith(vars, clock.now)
	tok, admin := mintToken(t, "quester"), mintToken(t, "ops", "admin")
	inc := func(event, action string) response {
		t.Helper()
		return svc.do(t, http.MethodPost, "/v1/scores/increment", tok, fmt.Sprintf(
			`{"user_id": "quester", "delta": 5, "event_id": %q, "timestamp": "2026-11-23T12:00:00Z", "action_id": %q}`, event, action))
	}
	for _, w := range []struct {
		at            time.Duration
		event, action string
		status        int
	}{
		{0, "e-1", "quest", 202},
		{31 * time.Second, "e-2", "quest", 202}, // the cooldown ended: a new claim takes the lock
		{35 * time.Second, "e-1", "quest", 202}, // a retry of the first claim, inside the second's cooldown
		{35 * time.Second, "e-3", "other", 202},
		{35 * time.Second, "e-4", "other-2", 202}, // the 4th new write: the retry spent nothing
		{35 * time.Second, "e-5", "other-3", 429},
	} {
		clock.set(now.Add(w.at))
		if r := inc(w.event, w.action); r.status != w.status {
			t.Fatalf("t+%s %s (%s): %d %s, want %d", w.at, w.event, w.action, r.status, r.raw, w.status)
		}
	}
	eventually(t, 10*time.Second, func() string {
		r := svc.do(t, http.MethodGet, "/admin/anomalies?user_id=quester", admin, "")
		if !strings.Contains(r.raw, `"rate_limited"`) {
			return "e-5's refusal not recorded yet: " + r.raw
		}
		if strings.Contains(r.raw, "cooldown_active") {
			t.Fatalf("the retry was recorded as a cooldown anomaly: %s", r.raw)
		}
		return ""
	})
}
