package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// api is the HTTP side of the bench: one server-role token, one tuned client; an
// admin-role token and a client without a timeout for slow admin calls (a rebuild).
type api struct {
	base      string
	auth      string
	adminAuth string
	client    *http.Client
	slow      *http.Client
	// raw, when set, carries the write phases' POSTs (rawPoster).
	raw *rawPoster
}

// withAudience adds the aud the service requires (LEADERBOARD_JWT_AUDIENCE, when set) to
// claims.
func withAudience(claims jwt.MapClaims) jwt.MapClaims {
	if aud := strings.TrimSpace(os.Getenv("LEADERBOARD_JWT_AUDIENCE")); aud != "" {
		claims["aud"] = aud
	}
	return claims
}

// mintToken signs a token for the loadgen with the given roles, valid for 24 h.
func mintToken(secret string, roles ...string) (string, error) {
	claims := withAudience(jwt.MapClaims{
		"sub":   "loadgen",
		"name":  "loadgen",
		"roles": roles,
		"iat":   time.Now().Unix(),
		"exp":   time.Now().Add(24 * time.Hour).Unix(),
	})
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return token, nil
}

// playerTokens mints player tokens (sub = the user, no roles, no name) lazily and keeps
// one per user, minting a new one when less than refresh of its life is left; safe for
// concurrent use.
type playerTokens struct {
	secret  []byte
	ttl     time.Duration
	refresh time.Duration
	now     func() time.Time

	mu     sync.Mutex
	byUser map[string]playerToken
	minted atomic.Int64
}

// playerToken is a cached "Bearer <jwt>" and its expiry.
type playerToken struct {
	auth string
	exp  time.Time
}

// Player tokens live an hour (well under the service's LEADERBOARD_JWT_MAX_TTL) and are
// replaced once less than 5 minutes of that is left.
const (
	playerTokenTTL     = time.Hour
	playerTokenRefresh = 5 * time.Minute
)

func newPlayerTokens(secret string, now func() time.Time) *playerTokens {
	if now == nil {
		now = time.Now
	}
	return &playerTokens{secret: []byte(secret), ttl: playerTokenTTL, refresh: playerTokenRefresh, now: now, byUser: map[string]playerToken{}}
}

// auth is the Authorization header value of the user's player token.
func (p *playerTokens) auth(user string) (string, error) {
	now := p.now()
	p.mu.Lock()
	t, ok := p.byUser[user]
	p.mu.Unlock()
	if ok && t.exp.Sub(now) >= p.refresh {
		return t.auth, nil
	}
	// Signed outside the lock; two goroutines minting for one user at once both get a
	// valid token (the bench holds a user in one goroutine at a time anyway).
	exp := now.Add(p.ttl)
	claims := withAudience(jwt.MapClaims{"sub": user, "iat": now.Unix(), "exp": exp.Unix()})
	raw, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(p.secret)
	if err != nil {
		return "", fmt.Errorf("sign player token: %w", err)
	}
	t = playerToken{auth: "Bearer " + raw, exp: time.Unix(exp.Unix(), 0)}
	p.minted.Add(1)
	p.mu.Lock()
	p.byUser[user] = t
	p.mu.Unlock()
	return t.auth, nil
}

func newAPI(cfg config) (*api, error) {
	token, err := mintToken(cfg.Secret, "server")
	if err != nil {
		return nil, err
	}
	admin, err := mintToken(cfg.Secret, "admin")
	if err != nil {
		return nil, err
	}
	conns := cfg.MaxInflight + cfg.Concurrency + 16
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     8 << 10,
		ReadBufferSize:      8 << 10,
	}
	var raw *rawPoster
	if !cfg.NetHTTPWrites {
		if raw, err = newRawPoster(cfg.Target, cfg.ReqTimeout, conns); err != nil {
			return nil, err
		}
	}
	return &api{
		raw:       raw,
		base:      cfg.Target,
		auth:      "Bearer " + token,
		adminAuth: "Bearer " + admin,
		client:    &http.Client{Transport: tr, Timeout: cfg.ReqTimeout},
		slow:      &http.Client{Transport: tr},
	}, nil
}

func (a *api) close() {
	a.client.CloseIdleConnections()
	if a.raw != nil {
		a.raw.close()
	}
}

// answer is a response's status and, for errors, its error_code and message.
type answer struct {
	status int
	code   string
	msg    string
	body   []byte
}

// do sends a request with the server token.
func (a *api) do(ctx context.Context, method, path string, body []byte) (answer, error) {
	return a.send(ctx, a.client, a.auth, method, path, body)
}

// admin sends a request with the admin token and no timeout but ctx's.
func (a *api) admin(ctx context.Context, method, path string, body []byte) (answer, error) {
	return a.send(ctx, a.slow, a.adminAuth, method, path, body)
}

func (a *api) send(ctx context.Context, client *http.Client, auth, method, path string, body []byte) (answer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", auth)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answer{status: resp.StatusCode}, err
	}
	return newAnswer(resp.StatusCode, b), nil
}

// newAnswer is the answer of a response with the status and body: for errors, the API's
// error_code and message.
func newAnswer(status int, b []byte) answer {
	ans := answer{status: status, body: b}
	if status >= 300 {
		var e struct {
			Code    string `json:"error_code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &e) == nil && e.Code != "" {
			ans.code, ans.msg = e.Code, e.Message
		} else {
			ans.code, ans.msg = "non_json_body", strings.TrimSpace(string(b))
		}
	}
	return ans
}

// post sends a write phase's POST: through the raw poster when there is one.
func (a *api) post(ctx context.Context, auth, path string, body []byte) (answer, error) {
	if a.raw != nil {
		return a.raw.post(ctx, path, auth, body)
	}
	return a.send(ctx, a.client, auth, http.MethodPost, path, body)
}

// submit posts one score for a user with the server token.
func (a *api) submit(ctx context.Context, eventID, userID string, score int64) (answer, error) {
	body := fmt.Appendf(nil, `{"score":%d,"event_id":%q,"user_id":%q}`, score, eventID, userID)
	return a.post(ctx, a.auth, "/v1/scores", body)
}

// increment posts one increment of the points board for a user with the server token.
func (a *api) increment(ctx context.Context, eventID, userID string, delta int64, at time.Time) (answer, error) {
	body := fmt.Appendf(nil, `{"user_id":%q,"delta":%d,"event_id":%q,"timestamp":%q}`, userID, delta, eventID, at.UTC().Format(time.RFC3339))
	return a.post(ctx, a.auth, "/v1/scores/increment", body)
}

// submitPlayer posts one score with a player's own token (auth is "Bearer <jwt>"): no
// user_id in the body, the token's sub names the user.
func (a *api) submitPlayer(ctx context.Context, auth, eventID string, score int64) (answer, error) {
	body := fmt.Appendf(nil, `{"score":%d,"event_id":%q}`, score, eventID)
	return a.post(ctx, auth, "/v1/scores", body)
}

// matchPoint posts one match point (match:{id}, daily and season) with the server token.
func (a *api) matchPoint(ctx context.Context, matchID, eventID, userID string, point int64) (answer, error) {
	body := fmt.Appendf(nil, `{"point":%d,"event_id":%q}`, point, eventID)
	return a.post(ctx, a.auth, "/v1/matches/"+url.PathEscape(matchID)+"/users/"+url.PathEscape(userID)+"/point", body)
}

// errorKey names an error outcome for the report: "503 dependency_unavailable" or
// "transport timeout".
func errorKey(ans answer, err error) (key, sample string) {
	if err == nil {
		return fmt.Sprintf("%d %s", ans.status, ans.code), ans.msg
	}
	var nerr net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "transport canceled", err.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &nerr) && nerr.Timeout():
		return "transport timeout", err.Error()
	case errors.Is(err, syscall.ECONNREFUSED):
		return "transport connection_refused", err.Error()
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "transport connection_reset", err.Error()
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "transport no_local_port", err.Error()
	default:
		return "transport other", err.Error()
	}
}
