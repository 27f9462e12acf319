package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// connectOutcome is how a stream's connection attempt ended.
type connectOutcome uint8

const (
	notTried  connectOutcome = iota
	connected                // 200 text/event-stream
	refused                  // 503 too_many_streams: the service's cap
	failed                   // any other answer, or no answer
)

// recvEvent is one leaderboard.updated a stream received.
type recvEvent struct {
	version int64
	ts      int64 // data.ts, Unix ns: when the service rendered the event
	at      int64 // when the loadgen had read the whole event, Unix ns
}

// stream is one SSE client. Its fields are written by its own goroutine only, and read by
// the report once that goroutine has ended.
type stream struct {
	user   string
	target *url.URL
	auth   string

	outcome     connectOutcome
	failKey     string // "503 too_many_streams", "transport timeout", ...
	failSample  string
	dialAt      time.Time
	connectedAt time.Time // the 200's headers were read
	firstAt     time.Time // the first leaderboard.updated (the snapshot) was read

	connMu    sync.Mutex
	conn      net.Conn // set once connected, closed by close
	events    []recvEvent
	last      atomic.Int64 // newest version received; -1 before the first (read while running)
	backwards int64        // versions lower than one received before (the contract says never)
	other     int64        // events of other names (user.rank.updated)
	malformed int64        // leaderboard.updated whose version or ts could not be read
	comments  int64        // comment lines (": connected", ": heartbeat")

	ended     bool // the stream ended before the loadgen closed it
	endedAt   time.Time
	endErr    string // "transport connection_reset", ...
	endSample string
}

// connect opens the stream: dial, send the request, read the answer's headers. It fills
// outcome (and failKey) and, when connected, leaves the body to read.
func (s *stream) connect(ctx context.Context, timeout time.Duration, closing *atomic.Bool, onConnected func()) (*sseReader, bool) {
	s.dialAt = time.Now()
	d := net.Dialer{Timeout: timeout, KeepAlive: -1}
	conn, err := d.DialContext(ctx, "tcp", s.target.Host)
	if err != nil {
		s.fail(errorKey(answer{}, err))
		return nil, false
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	req := "GET " + s.target.RequestURI() + " HTTP/1.1\r\nHost: " + s.target.Host +
		"\r\nAuthorization: " + s.auth + "\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		conn.Close()
		s.fail(errorKey(answer{}, err))
		return nil, false
	}
	br := bufio.NewReaderSize(conn, 1024)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		s.fail(errorKey(answer{}, err))
		return nil, false
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		conn.Close()
		ans := answer{status: resp.StatusCode, body: body}
		var e struct {
			Code    string `json:"error_code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &e) == nil && e.Code != "" {
			ans.code, ans.msg = e.Code, e.Message
		} else {
			ans.code, ans.msg = "non_json_body", string(bytes.TrimSpace(body))
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			ans.msg += " (Retry-After: " + ra + ")"
		}
		s.fail(errorKey(ans, nil))
		if resp.StatusCode == http.StatusServiceUnavailable && e.Code == "too_many_streams" {
			s.outcome = refused
		}
		return nil, false
	}
	_ = conn.SetDeadline(time.Time{})
	s.outcome, s.connectedAt = connected, time.Now()
	s.connMu.Lock()
	s.conn = conn
	if closing.Load() { // closeStreams has passed this one already
		conn.Close()
	}
	s.connMu.Unlock()
	onConnected()
	return newSSEReader(resp.Body, 4<<10, 1<<20), true
}

// close ends the stream if it is open; safe to call from any goroutine.
func (s *stream) close() {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.conn != nil {
		s.conn.Close()
	}
}

func (s *stream) fail(key, sample string) {
	s.outcome, s.failKey, s.failSample = failed, key, sample
}

// read consumes the stream until it ends; closing says whether the loadgen is closing
// the streams (an end after that is not a drop, else it is counted in dropped).
func (s *stream) read(r *sseReader, closing *atomic.Bool, dropped *atomic.Int64) {
	for {
		ev, err := r.next()
		if err != nil {
			s.comments = r.comments
			if !closing.Load() {
				dropped.Add(1)
				s.ended, s.endedAt = true, time.Now()
				s.endErr, s.endSample = "clean end of stream (the service closed it)", ""
				if !errors.Is(err, io.EOF) {
					s.endErr, s.endSample = errorKey(answer{}, err)
				}
			}
			return
		}
		now := time.Now()
		if string(ev.name) != "leaderboard.updated" {
			s.other++
			continue
		}
		te, ok := parseTopEvent(ev)
		if !ok {
			s.malformed++
			continue
		}
		if s.firstAt.IsZero() {
			s.firstAt = now
		}
		if last := s.last.Load(); te.version < last {
			s.backwards++
		} else {
			s.last.Store(te.version)
		}
		s.events = append(s.events, recvEvent{version: te.version, ts: te.ts.UnixNano(), at: now.UnixNano()})
	}
}

// streamURL is the stream endpoint of a base URL.
func streamURL(base, board string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(base, "/") + "/v1/realtime/leaderboard?board=" + url.QueryEscape(board))
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("target %q: want http://host:port", base)
	}
	if u.Port() == "" {
		u.Host += ":80"
	}
	return u, nil
}
