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
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// api is the HTTP side of the bench: one server-role token, one tuned client.
type api struct {
	base   string
	auth   string
	client *http.Client
}

func newAPI(cfg config) (*api, error) {
	claims := jwt.MapClaims{
		"sub":   "loadgen",
		"name":  "loadgen",
		"roles": []string{"server"},
		"iat":   time.Now().Unix(),
		"exp":   time.Now().Add(24 * time.Hour).Unix(),
	}
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(cfg.Secret))
	if err != nil {
		return nil, fmt.Errorf("sign token: %w", err)
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
	return &api{
		base:   cfg.Target,
		auth:   "Bearer " + token,
		client: &http.Client{Transport: tr, Timeout: cfg.ReqTimeout},
	}, nil
}

func (a *api) close() { a.client.CloseIdleConnections() }

// answer is a response's status and, for errors, its error_code and message.
type answer struct {
	status int
	code   string
	msg    string
	body   []byte
}

func (a *api) do(ctx context.Context, method, path string, body []byte) (answer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", a.auth)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answer{status: resp.StatusCode}, err
	}
	ans := answer{status: resp.StatusCode, body: b}
	if resp.StatusCode >= 300 {
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
	return ans, nil
}

// submit posts one score for a user with the server token.
func (a *api) submit(ctx context.Context, eventID, userID string, score int64) (answer, error) {
	body := fmt.Appendf(nil, `{"score":%d,"event_id":%q,"user_id":%q}`, score, eventID, userID)
	return a.do(ctx, http.MethodPost, "/v1/scores", body)
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
