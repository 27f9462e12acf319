package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// sseEvent is one event of a stream, as the EventSource spec parses it.
type sseEvent struct {
	id, name string
	data     map[string]any
	at       time.Time
}

// sseClient reads a stream in the background.
type sseClient struct {
	resp   *http.Response
	cancel context.CancelFunc
	mu     sync.Mutex
	events []sseEvent
	notes  []string // comment lines
	closed chan struct{}
}

func (s *service) realtimeToken(t *testing.T, bearer string) string {
	t.Helper()
	r := s.do(t, http.MethodGet, "/v1/realtime/token", bearer, "")
	if r.status != 200 || !hasText(r.body["token"]) || !hasText(r.body["expires_at"]) {
		t.Fatalf("realtime token: %d %s", r.status, r.raw)
	}
	return r.body["token"].(string)
}

// stream opens the SSE endpoint; status is returned when it is not 200.
func (s *service) stream(t *testing.T, query, lastEventID string) (*sseClient, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/v1/realtime/leaderboard?"+query, nil)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	c := &sseClient{resp: resp, cancel: cancel, closed: make(chan struct{})}
	t.Cleanup(c.close)
	go c.read()
	return c, 200
}

// mustStream opens the SSE endpoint and requires 200.
func (s *service) mustStream(t *testing.T, query, lastEventID string) *sseClient {
	t.Helper()
	c, status := s.stream(t, query, lastEventID)
	if status != 200 {
		t.Fatalf("stream %s: %d", query, status)
	}
	return c
}

func (c *sseClient) close() { c.cancel(); <-c.closed }

func (c *sseClient) read() {
	defer close(c.closed)
	defer c.resp.Body.Close()
	sc := bufio.NewScanner(c.resp.Body)
	var ev sseEvent
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(data) > 0 {
				ev.at = time.Now()
				_ = json.Unmarshal([]byte(strings.Join(data, "\n")), &ev.data)
				c.mu.Lock()
				c.events = append(c.events, ev)
				c.mu.Unlock()
			}
			ev, data = sseEvent{}, nil
		case strings.HasPrefix(line, ":"):
			c.mu.Lock()
			c.notes = append(c.notes, strings.TrimSpace(line[1:]))
			c.mu.Unlock()
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = append(data, line[6:])
		}
	}
}

func (c *sseClient) named(name string) []sseEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []sseEvent
	for _, e := range c.events {
		if e.name == name {
			out = append(out, e)
		}
	}
	return out
}

func (c *sseClient) versions() []int64 {
	var out []int64
	for _, e := range c.named("leaderboard.updated") {
		v, _ := strconv.ParseInt(e.id, 10, 64)
		out = append(out, v)
	}
	return out
}

func (c *sseClient) lastVersion() int64 {
	v := c.versions()
	if len(v) == 0 {
		return -1
	}
	return v[len(v)-1]
}

// mustApply submits with ?wait=true and requires the score applied (Redis shows it), so
// the top's version read next already counts it.
func mustApply(t *testing.T, s *service, tok, body string) {
	t.Helper()
	if r := s.do(t, http.MethodPost, "/v1/scores?wait=true", tok, body); r.status != 200 || r.body["status"] != "applied" {
		t.Fatalf("submit %s: %d %s", body, r.status, r.raw)
	}
}

func topVersion(t *testing.T, s *service, tok string) int64 {
	t.Helper()
	return num(s.do(t, http.MethodGet, "/v1/leaderboard/top", tok, "").body["version"])
}

// TestRealtimeStream: snapshot on connect, updates after submissions, the user's own
// rank event, coalescing under a burst, versions only increasing, heartbeats.
func TestRealtimeStream(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(map[string]string{"LEADERBOARD_SSE_HEARTBEAT": "300ms"})
	alice := mintToken(t, "alice")
	connected := time.Now()
	c, status := svc.stream(t, "board=global&token="+svc.realtimeToken(t, alice), "")
	if status != 200 {
		t.Fatalf("stream: %d", status)
	}
	eventually(t, 20*time.Second, func() string {
		if len(c.named("leaderboard.updated")) == 0 {
			return "no snapshot on connect"
		}
		return ""
	})
	snap := c.named("leaderboard.updated")[0]
	if snap.id != fmt.Sprint(num(snap.data["version"])) || len(snap.data["entries"].([]any)) != 0 || snap.data["board"] != "global" || snap.data["period"] != "all_time" {
		t.Fatalf("empty-board snapshot: id %q %v", snap.id, snap.data)
	}

	mustApply(t, svc, alice, `{"score": 50}`)
	eventually(t, 20*time.Second, func() string {
		u := c.named("user.rank.updated")
		if len(u) == 0 || u[len(u)-1].data["user_id"] != "alice" || num(u[len(u)-1].data["rank"]) != 1 || num(u[len(u)-1].data["score"]) != 50 {
			return fmt.Sprintf("user events %v", u)
		}
		if c.lastVersion() < 1 {
			return "no update after the submission"
		}
		return ""
	})

	// A burst: 40 new leaders as fast as the API takes them.
	for i := range 40 {
		svc.submit(t, mintToken(t, fmt.Sprintf("burst-%02d", i)), fmt.Sprintf(`{"score": %d}`, 100+i))
	}
	tok := mintToken(t, "reader")
	eventually(t, 30*time.Second, func() string { // every burst score in Redis (202 came before that)
		if n := env.rdb.ZCard(context.Background(), env.prefix+":{global}:all_time:z").Val(); n != 41 {
			return fmt.Sprintf("%d of 41 entries in Redis", n)
		}
		return ""
	})
	eventually(t, 20*time.Second, func() string {
		if want := topVersion(t, svc, tok); c.lastVersion() != want {
			return fmt.Sprintf("stream at version %d, top at %d", c.lastVersion(), want)
		}
		return ""
	})
	ups := c.named("leaderboard.updated")
	last := ups[len(ups)-1]
	if entries := last.data["entries"].([]any); len(entries) != 10 || entries[0].(map[string]any)["user_id"] != "burst-39" {
		t.Fatalf("final snapshot: %v", last.data)
	}
	// Versions only increase, and the server spaces snapshots at least 250 ms apart (the
	// hub's unit tests check the window exactly, on an injected clock). Every snapshot was
	// sent between the connect and the receipt of the last one, so however fast or slow the
	// machine, that span holds at most one snapshot per window plus the first.
	for i := 1; i < len(ups); i++ {
		v0, _ := strconv.Atoi(ups[i-1].id)
		v1, _ := strconv.Atoi(ups[i].id)
		if v1 <= v0 {
			t.Fatalf("versions went %d -> %d", v0, v1)
		}
	}
	span := last.at.Sub(connected)
	if most := int(span/(250*time.Millisecond)) + 1; len(ups) > most {
		t.Fatalf("%d snapshots in %v: more than one per 250 ms window (at most %d): not coalesced", len(ups), span, most)
	}
	if len(ups) >= 42 { // the connect snapshot, alice's and 40 leaders
		t.Fatalf("a snapshot for every change (%d): not coalesced", len(ups))
	}
	// Heartbeats every 300 ms here: a quiet stream shows several within a second or two.
	eventually(t, 20*time.Second, func() string {
		c.mu.Lock()
		defer c.mu.Unlock()
		if beats := strings.Count(strings.Join(c.notes, "\n"), "heartbeat"); beats < 3 {
			return fmt.Sprintf("%d heartbeats", beats)
		}
		return ""
	})
}

// TestRealtimeReconnect: Last-Event-ID gets the latest snapshot when it is newer, and
// never an older one.
func TestRealtimeReconnect(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	tok := mintToken(t, "re")
	for i := range 3 {
		mustApply(t, svc, mintToken(t, fmt.Sprintf("re-%d", i)), fmt.Sprintf(`{"score": %d}`, 10+i))
	}
	current := topVersion(t, svc, tok)
	rt := svc.realtimeToken(t, tok)

	behind := svc.mustStream(t, "token="+rt, strconv.FormatInt(current-1, 10))
	upToDate := svc.mustStream(t, "token="+rt, strconv.FormatInt(current, 10))
	ahead := svc.mustStream(t, "token="+rt, strconv.FormatInt(current+1000, 10))
	eventually(t, 20*time.Second, func() string {
		if behind.lastVersion() != current {
			return fmt.Sprintf("behind client at %d, want %d", behind.lastVersion(), current)
		}
		return ""
	})
	time.Sleep(500 * time.Millisecond)
	if v := upToDate.versions(); len(v) != 0 {
		t.Fatalf("up-to-date client got %v again", v)
	}
	if v := ahead.versions(); len(v) != 0 {
		t.Fatalf("client ahead got older versions %v", v)
	}
	// A new change reaches the up-to-date client without a gap.
	mustApply(t, svc, mintToken(t, "re-new"), `{"score": 99}`)
	next := topVersion(t, svc, tok)
	eventually(t, 20*time.Second, func() string {
		if upToDate.lastVersion() != next {
			return fmt.Sprintf("up-to-date client at %d, want %d", upToDate.lastVersion(), next)
		}
		return ""
	})
}

// TestRealtimeRefusals: bad tokens get 401 before the stream opens, unknown boards
// 404, and the stream caps 503 with Retry-After.
func TestRealtimeRefusals(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(map[string]string{"LEADERBOARD_SSE_MAX_STREAMS_PER_USER": "2", "LEADERBOARD_SSE_MAX_STREAMS": "3"})
	tok := mintToken(t, "cap")
	rt := svc.realtimeToken(t, tok)
	for name, q := range map[string]string{
		"no token":                "board=global",
		"garbage token":           "token=abc",
		"bearer token in the URL": "token=" + tok, // only realtime tokens belong in URLs
		"tampered realtime token": "token=" + rt[:len(rt)-2] + "xx",
	} {
		if _, status := svc.stream(t, q, ""); status != 401 {
			t.Errorf("%s: %d, want 401", name, status)
		}
	}
	if _, status := svc.stream(t, "board=nope&token="+rt, ""); status != 404 {
		t.Errorf("unknown board: %d", status)
	}
	for i := range 2 {
		if _, status := svc.stream(t, "token="+rt, ""); status != 200 {
			t.Fatalf("stream %d of a user allowed 2: %d", i+1, status)
		}
	}
	r := svc.do(t, http.MethodGet, "/v1/realtime/leaderboard?token="+rt, "", "")
	if r.status != 503 || r.header.Get("Retry-After") == "" || r.body["error_code"] != "too_many_streams" {
		t.Fatalf("third stream of one user: %d %s", r.status, r.raw)
	}
	other := svc.realtimeToken(t, mintToken(t, "other"))
	if _, status := svc.stream(t, "token="+other, ""); status != 200 {
		t.Fatalf("third stream in all, another user's first: %d", status)
	}
	if _, status := svc.stream(t, "token="+svc.realtimeToken(t, mintToken(t, "fourth")), ""); status != 503 {
		t.Fatalf("stream past the total cap: %d", status)
	}
}

// TestRealtimeTwoAPIProcesses: two API processes on the same Kafka and Redis stream the
// same versions in the same order.
func TestRealtimeTwoAPIProcesses(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	a := env.start(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker})
	b := env.start(map[string]string{"LEADERBOARD_KAFKA_BROKERS": broker, "LEADERBOARD_ROLES": "api", "LEADERBOARD_HTTP_ADDR": "127.0.0.1:" + freePort(t)})
	tok := mintToken(t, "twin")
	ca, sa := a.stream(t, "token="+a.realtimeToken(t, tok), "")
	cb, sb := b.stream(t, "token="+b.realtimeToken(t, tok), "")
	if sa != 200 || sb != 200 {
		t.Fatalf("streams: %d, %d", sa, sb)
	}
	for i := range 5 {
		mustApply(t, a, mintToken(t, fmt.Sprintf("twin-%d", i)), fmt.Sprintf(`{"score": %d}`, 10+i))
		// Both streams show this write's version before the next write: every version is
		// streamed, however slow the machine (no coalescing window to outwait).
		want := topVersion(t, a, tok)
		eventually(t, 20*time.Second, func() string {
			if ca.lastVersion() != want || cb.lastVersion() != want {
				return fmt.Sprintf("after write %d: a at %d, b at %d, want %d", i, ca.lastVersion(), cb.lastVersion(), want)
			}
			return ""
		})
	}
	if va, vb := fmt.Sprint(ca.versions()), fmt.Sprint(cb.versions()); va != vb {
		t.Fatalf("process a streamed %s, process b %s", va, vb)
	}
}

// TestRealtimeStreamOfAMatchWithoutEntries: GET /v1/boards/match:{id}/top of a match that
// has no point yet is 404 unknown_board (a client's mistake, or a match not started), and
// so is its stream: it was 503 dependency_unavailable with every store up (a match page
// opened before the first point was told the service is down). Found by a review.
func TestRealtimeStreamOfAMatchWithoutEntries(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	viewer := mintToken(t, "viewer")
	if r := svc.do(t, http.MethodGet, "/v1/boards/match:not-started/top", viewer, ""); r.status != 404 {
		t.Fatalf("GET top of a match without entries: %d %s", r.status, r.raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, svc.base+"/v1/realtime/leaderboard?board=match:not-started&token="+svc.realtimeToken(t, viewer), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"unknown_board"`) {
		t.Fatalf("stream of a match without entries: %d %s, want 404 unknown_board as GET /top answers", resp.StatusCode, body)
	}
}

// TestRealtimeEmptyBoardSnapshotAgreesWithTop: the snapshot of a board period without
// entries says what GET /top says of it: updated_at null (it said the moment the empty
// period was loaded into Redis, when nothing on the board changed). Found by a review.
func TestRealtimeEmptyBoardSnapshotAgreesWithTop(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	viewer := mintToken(t, "viewer")
	c := svc.mustStream(t, "board=daily&token="+svc.realtimeToken(t, viewer), "")
	eventually(t, 20*time.Second, func() string {
		if len(c.named("leaderboard.updated")) == 0 {
			return "no snapshot on connect"
		}
		return ""
	})
	snap := c.named("leaderboard.updated")[0].data
	top := svc.do(t, http.MethodGet, "/v1/boards/daily/top", viewer, "")
	if top.status != 200 || len(top.body["entries"].([]any)) != 0 || top.body["updated_at"] != nil {
		t.Fatalf("GET top of the empty day: %d %s", top.status, top.raw)
	}
	if len(snap["entries"].([]any)) != 0 || snap["period"] != top.body["period"] {
		t.Fatalf("snapshot %v", snap)
	}
	if u, ok := snap["updated_at"]; ok && u != nil {
		t.Fatalf("the empty board's snapshot says it changed at %v; GET /top says updated_at null: %s", u, top.raw)
	}
}

// TestRealtimeStreamMovesToANewSeason: a stream of a season board without ?period=
// follows the current season, and API.md says it moves on to the next period at a reset;
// for a season board the reset is an admin starting a season, which wakes the process's
// streams of the board. They looked again only when they woke for something else: the
// next heartbeat, up to 15 s later, while GET /top, the writes and every other read were
// in the new season at once. Found by a review.
func TestRealtimeStreamMovesToANewSeason(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil) // the default heartbeat, 15 s
	admin, srv, viewer := mintToken(t, "ops", "admin"), mintToken(t, "gs", "server"), mintToken(t, "viewer")
	c := svc.mustStream(t, "board=season&token="+svc.realtimeToken(t, viewer), "")
	eventually(t, 20*time.Second, func() string {
		if ups := c.named("leaderboard.updated"); len(ups) == 0 || ups[0].data["period"] != "1" {
			return fmt.Sprintf("snapshot on connect: %v", ups)
		}
		return ""
	})
	heartbeats := func() int { // comment lines after ": connected"
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.notes)
	}
	before := heartbeats()
	if r := svc.do(t, http.MethodPost, "/admin/boards/season/seasons", admin, `{"season": "s2", "reason": "next"}`); r.status != 201 {
		t.Fatalf("start a season: %d %s", r.status, r.raw)
	}
	// The stream must move on a wake of the season's start, not on the next heartbeat
	// (a heartbeat's comment comes before what that wake writes). The admin's request
	// wakes this process's streams, and the process's season watcher wakes them within a
	// second or two too (TestSeasonStartMovesThisProcesssStreams, in package http, pins
	// the first without the second); the write in the new season, which would also move
	// the stream, comes after.
	eventually(t, 20*time.Second, func() string {
		if ups := c.named("leaderboard.updated"); ups[len(ups)-1].data["period"] != "s2" {
			return fmt.Sprintf("the stream still shows season %v after the season s2 started (GET /top and writes in s2 at once)", ups[len(ups)-1].data["period"])
		}
		return ""
	})
	if n := heartbeats() - before; n > 0 {
		t.Fatalf("the stream moved to the season s2 only after %d heartbeat(s) woke it", n)
	}
	if r := svc.do(t, http.MethodPost, "/v1/boards/season/scores?wait=true", srv, `{"value": 5, "user_id": "sia"}`); r.status != 200 || r.body["period"] != "s2" {
		t.Fatalf("write in the new season: %d %s", r.status, r.raw)
	}
}

// TestRealtimeStreamOfAnotherProcessMovesToANewSeason: a season started through API
// process a moves process b's stream of the board within about two seconds, with no
// write in the new season: b looks at the board's current season every second
// (WatchSeasons) and wakes its streams when it changed. Without it they moved at their
// next update or heartbeat (15 s).
func TestRealtimeStreamOfAnotherProcessMovesToANewSeason(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	broker := "127.0.0.1:" + freePort(t)
	a := env.start(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": broker})
	b := env.start(map[string]string{"LEADERBOARD_KAFKA_BROKERS": broker, "LEADERBOARD_ROLES": "api", "LEADERBOARD_HTTP_ADDR": "127.0.0.1:" + freePort(t)})
	viewer, admin := mintToken(t, "viewer"), mintToken(t, "ops", "admin")
	c := b.mustStream(t, "board=season&token="+b.realtimeToken(t, viewer), "")
	eventually(t, 20*time.Second, func() string {
		if ups := c.named("leaderboard.updated"); len(ups) == 0 || ups[0].data["period"] != "1" {
			return fmt.Sprintf("snapshot on connect: %v", ups)
		}
		return ""
	})
	started := time.Now()
	if r := a.do(t, http.MethodPost, "/admin/boards/season/seasons", admin, `{"season": "s2", "reason": "next"}`); r.status != 201 {
		t.Fatalf("start a season through a: %d %s", r.status, r.raw)
	}
	for time.Since(started) < 10*time.Second { // the heartbeat, 15 s, would move it later
		if ups := c.named("leaderboard.updated"); ups[len(ups)-1].data["period"] == "s2" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	ups := c.named("leaderboard.updated")
	t.Fatalf("10 s after season s2 started through process a, b's stream still shows season %v", ups[len(ups)-1].data["period"])
}

// TestHeadOfTheStreamOfAMatchNeverPlayedIsNotFound: README and openapi: "HEAD is
// answered as the GET of the path without its body". The stream's GET of a match never
// played is 404 unknown_board; its HEAD once answered 200 text/event-stream before the hub
// was asked, telling a monitor probing with HEAD that the stream existed.
func TestHeadOfTheStreamOfAMatchNeverPlayedIsNotFound(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	rt := svc.realtimeToken(t, mintToken(t, "alice"))
	path := "/v1/realtime/leaderboard?board=match:ghost&token=" + rt
	get := probeStatus(t, svc, path)
	head := svc.do(t, http.MethodHead, path, "", "")
	if get != head.status {
		t.Errorf("stream of a match never played: GET %d, HEAD %d (Content-Type %q); want HEAD to answer as the GET",
			get, head.status, head.header.Get("Content-Type"))
	}
}

// TestRealtimeRankOthersMovedBelowTheTop: dave, 13th and outside the top 10, streams the
// global board. Another player passes him without reaching the top 10: no entry of dave's
// changed and the streamed top is the same, but his rank is 14 now. His stream says so
// (user.rank.updated, rank 14) within the refresh interval (5 s); it kept saying 13.
func TestRealtimeRankOthersMovedBelowTheTop(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	srv, dave := mintToken(t, "game-server", "server"), mintToken(t, "dave")
	for i := range 12 {
		mustApply(t, svc, srv, fmt.Sprintf(`{"score": %d, "user_id": "top%d"}`, 1000+i, i))
	}
	mustApply(t, svc, dave, `{"score": 500}`)
	c := svc.mustStream(t, "board=global&token="+svc.realtimeToken(t, dave), "")
	rankSaid := func() int64 {
		ev := c.named("user.rank.updated")
		if len(ev) == 0 {
			return 0
		}
		return num(ev[len(ev)-1].data["rank"])
	}
	eventually(t, 5*time.Second, func() string {
		if r := rankSaid(); r != 13 {
			return fmt.Sprintf("dave's own entry on connect: rank %v, want 13", r)
		}
		return ""
	})
	tops := len(c.named("leaderboard.updated"))
	mustApply(t, svc, srv, `{"score": 600, "user_id": "passer"}`)
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/me", dave, ""); num(r.body["rank"]) != 14 {
		t.Fatalf("dave's rank after he was passed: %s", r.raw)
	}
	eventually(t, 12*time.Second, func() string {
		if r := rankSaid(); r != 14 {
			return fmt.Sprintf("dave's stream says rank %v, GET /v1/leaderboard/me 14", r)
		}
		return ""
	})
	if n := len(c.named("leaderboard.updated")); n != tops {
		t.Errorf("the top 10 did not change, but the stream sent %d snapshots more", n-tops)
	}
}

// streamedUsers are the user ids of the stream's newest leaderboard.updated.
func streamedUsers(c *sseClient) []string {
	ups := c.named("leaderboard.updated")
	if len(ups) == 0 {
		return nil
	}
	var out []string
	for _, e := range ups[len(ups)-1].data["entries"].([]any) {
		out = append(out, e.(map[string]any)["user_id"].(string))
	}
	return out
}

// TestBanReachesTheStreamOfAClosedPeriod: a stream of a day Redis no longer keeps
// (LEADERBOARD_REDIS_PAST_PERIODS=0, ?period= of that day) shows a cheater; an admin bans
// him. GET /top of that day stops listing him at once, and the stream within its refresh
// (it showed him for good: no notification comes for a period Redis does not keep, and the
// refresh skipped such periods; found by a review of the live feed).
func TestBanReachesTheStreamOfAClosedPeriod(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	clk := &testClock{}
	clk.set(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	svc := env.startWith(map[string]string{"LEADERBOARD_REDIS_PAST_PERIODS": "0"}, clk.now)
	admin, viewer := mintToken(t, "mod", "admin"), mintToken(t, "viewer")
	for i, u := range []string{"cheater", "honest"} {
		writeAs(t, svc, "daily", u, 100-i)
	}
	clk.set(time.Date(2026, 1, 2, 13, 30, 0, 0, time.UTC)) // 2026-01-01 is closed: past the grace hour after its successor began
	c := svc.mustStream(t, "board=daily&period=2026-01-01&token="+svc.realtimeToken(t, viewer), "")
	eventually(t, 20*time.Second, func() string {
		if u := streamedUsers(c); len(u) != 2 {
			return fmt.Sprintf("snapshot: %v", u)
		}
		return ""
	})
	if r := svc.do(t, http.MethodPost, "/admin/users/cheater/ban?wait=true", admin, `{"reason": "aimbot"}`); r.status != 200 {
		t.Fatalf("ban: %d %s", r.status, r.raw)
	}
	eventually(t, 20*time.Second, func() string { // the refresh runs every 5 s
		if u := streamedUsers(c); fmt.Sprint(u) != "[honest]" {
			return fmt.Sprintf("the stream of the closed day after the ban shows %v", u)
		}
		return ""
	})
}
