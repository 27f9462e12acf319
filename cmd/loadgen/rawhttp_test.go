package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRawPosterAgainstNetHTTP drives the raw poster against a net/http server: the request
// the handler sees, answers sized by Content-Length, chunked, closed by the server, error
// bodies, keep-alive reuse, and a timeout.
func TestRawPosterAgainstNetHTTP(t *testing.T) {
	var conns atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/scores", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("Authorization") != "Bearer x" || r.Header.Get("Content-Type") != "application/json" || string(b) != `{"score":7}` || r.Host == "" {
			http.Error(w, "bad request "+r.Header.Get("Authorization")+" "+string(b), http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"event_id":"e","status":"accepted"}`+"\n")
	})
	mux.HandleFunc("POST /chunked", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for range 3 {
			io.WriteString(w, strings.Repeat("a", 3000)) // past net/http's buffer: chunked
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("POST /close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error_code":"backlog_full","message":"behind"}`)
	})
	mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	// A generous timeout (a stall of a loaded machine fails nothing); the slow answer below
	// goes through a poster of its own with a short one.
	p, err := newRawPoster(srv.URL, 10*time.Second, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	ctx := context.Background()

	for i := range 5 {
		ans, err := p.post(ctx, "/v1/scores", "Bearer x", []byte(`{"score":7}`))
		if err != nil || ans.status != http.StatusAccepted || string(ans.body) != `{"event_id":"e","status":"accepted"}`+"\n" {
			t.Fatalf("post %d: %+v %v", i, ans, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 sequential posts used %d connections, want 1 (keep-alive)", n)
	}

	ans, err := p.post(ctx, "/chunked", "Bearer x", nil)
	if err != nil || ans.status != http.StatusOK || string(ans.body) != strings.Repeat("a", 9000) {
		t.Fatalf("chunked: status %d, %d bytes, %v", ans.status, len(ans.body), err)
	}
	if ans, err = p.post(ctx, "/v1/scores", "Bearer x", []byte(`{"score":7}`)); err != nil || ans.status != http.StatusAccepted {
		t.Fatalf("after a chunked answer the connection is reused cleanly: %+v %v", ans, err)
	}

	before := conns.Load()
	ans, err = p.post(ctx, "/close", "Bearer x", nil)
	if err != nil || ans.status != http.StatusServiceUnavailable || ans.code != "backlog_full" || ans.msg != "behind" {
		t.Fatalf("close: %+v %v", ans, err)
	}
	if ans, err = p.post(ctx, "/v1/scores", "Bearer x", []byte(`{"score":7}`)); err != nil || ans.status != http.StatusAccepted {
		t.Fatalf("after Connection: close: %+v %v", ans, err)
	}
	if conns.Load() != before+1 {
		t.Errorf("a connection the server closed was reused (%d new connections, want 1)", conns.Load()-before)
	}

	if ans, err = p.post(ctx, "/v1/scores", "Bearer y", []byte(`{"score":7}`)); err != nil || ans.status != http.StatusTeapot || ans.code != "non_json_body" {
		t.Fatalf("a wrong header reaches the handler as written: %+v %v", ans, err)
	}

	short, err := newRawPoster(srv.URL, 100*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer short.close()
	_, err = short.post(ctx, "/slow", "Bearer x", nil)
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("slow answer: err %v, want a timeout", err)
	}
	if key, _ := errorKey(answer{}, err); key != "transport timeout" {
		t.Errorf("slow answer reported as %q", key)
	}
}

// TestReadResponseRefusesMalformed: answers the poster cannot parse are errors.
func TestReadResponseRefusesMalformed(t *testing.T) {
	for _, raw := range []string{
		"HTTP/1.1 20 OK\r\n\r\n",
		"HTTP/1.1 202 Accepted\r\nContent-Length: x\r\n\r\n",
		"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 202 Accepted\r\nno colon\r\n\r\n",
		"HTTP/1.1 202 Accepted\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nz\r\n",
		"garbage\r\n\r\n",
	} {
		if _, _, _, err := readResponse(bufio.NewReader(strings.NewReader(raw))); err == nil {
			t.Errorf("%q: no error", raw)
		}
	}
}
