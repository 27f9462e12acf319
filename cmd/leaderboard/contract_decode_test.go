package main

// Public endpoints against API.md: mismatches a review found, each test failing before
// its fix.

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// API.md, Conventions: "404 unknown board/user"; Writes: `POST /v1/scores` is "best score on
// `global`". With a LEADERBOARD_BOARDS_FILE that defines no `global` board, every other
// endpoint of the global board (GET /v1/leaderboard/top, /me, /users/{id}) answers
// 404 unknown_board, and so must POST /v1/scores. It looked the board up and ignored that
// it was missing: a score of 0 was answered 202 accepted (a command for a board with an
// empty id went into the outbox) and any other score 400 value_out_of_range ("a value on
// board  must be from 0 to 0").
func TestSubmitScoreWithoutGlobalBoardIs404(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	file := filepath.Join(t.TempDir(), "boards.json")
	if err := os.WriteFile(file, []byte(`{"boards": [{"id": "laps", "operator": "best", "order": "asc", "period": "weekly", "min_value": 1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	svc := env.start(map[string]string{"LEADERBOARD_BOARDS_FILE": file})
	alice := mintToken(t, "alice")
	if r := svc.do(t, http.MethodGet, "/v1/leaderboard/top", alice, ""); r.status != 404 || r.body["error_code"] != "unknown_board" {
		t.Fatalf("GET /v1/leaderboard/top without a global board: %d %s", r.status, r.raw)
	}
	for _, body := range []string{`{"score": 0, "event_id": "r22-g0"}`, `{"score": 5, "event_id": "r22-g5"}`} {
		if r := svc.submit(t, alice, body); r.status != 404 || r.body["error_code"] != "unknown_board" {
			t.Errorf("POST /v1/scores %s without a global board: got %d %s, want 404 unknown_board", body, r.status, r.raw)
		}
	}
	if n := env.count(`SELECT count(*) FROM score_requests`); n != 0 {
		t.Errorf("POST /v1/scores without a global board recorded %d commands, want none", n)
	}
}

// API.md, Auth: a user id is "1–64 of `[A-Za-z0-9_.:-]`", and match boards are read and
// written as `match:{match_id}` in the path (`/v1/boards/{board_id}/...`). A client that
// percent-encodes its path segments (encodeURIComponent, urllib.parse.quote) sends ':' as
// %3A; the service must decode path parameters before it checks them, as it decodes query
// parameters. It routed on the raw path and checked the still-encoded text: steam%3A42 was
// 400 invalid_user_id and match%3Am1 404 unknown_board although both name what exists.
func TestPercentEncodedPathParameters(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	svc := env.start(nil)
	steam, srv := mintToken(t, "steam:42"), mintToken(t, "gs", "server")
	if r := svc.submit(t, steam, `{"score": 5}`); r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodPost, "/v1/matches/m1/users/steam:42/point?wait=true", srv, `{"point": 3}`); r.status != 200 {
		t.Fatalf("match point: %d %s", r.status, r.raw)
	}
	eventually(t, 20*time.Second, func() string {
		if r := svc.do(t, http.MethodGet, "/v1/leaderboard/users/steam:42", steam, ""); r.status != 200 {
			return r.raw
		}
		return ""
	})
	for _, c := range []struct{ path, user string }{
		{"/v1/leaderboard/users/steam%3A42", "steam:42"},
		{"/v1/boards/global/users/steam%3a42", "steam:42"},
		{"/v1/boards/match%3Am1/users/steam%3A42", "steam:42"},
		{"/v1/daily-leaderboard/users/steam%3A42", "steam:42"},
	} {
		if r := svc.do(t, http.MethodGet, c.path, steam, ""); r.status != 200 || r.body["user_id"] != c.user {
			t.Errorf("GET %s: got %d %s, want 200 with user_id %q", c.path, r.status, r.raw, c.user)
		}
	}
	if r := svc.do(t, http.MethodGet, "/v1/boards/match%3Am1/top", steam, ""); r.status != 200 || r.body["board"] != "match:m1" {
		t.Errorf("GET /v1/boards/match%%3Am1/top: got %d %s, want 200 of board match:m1", r.status, r.raw)
	}
	if r := svc.do(t, http.MethodPost, "/v1/matches/m1/users/steam%3A42/point", srv, `{"point": 1, "event_id": "r22-enc"}`); r.status != 202 {
		t.Errorf("POST /v1/matches/m1/users/steam%%3A42/point: got %d %s, want 202", r.status, r.raw)
	}
}
