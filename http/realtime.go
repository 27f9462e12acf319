package http

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RealtimeConfig tunes the SSE endpoint.
type RealtimeConfig struct {
	// Heartbeat is the interval of comment lines on idle streams (default 15 s).
	Heartbeat time.Duration
	// WriteTimeout bounds one write to a client (default 10 s); a client that cannot
	// take an event that long is dropped.
	WriteTimeout time.Duration
	// TokenTTL is the lifetime of tokens from /v1/realtime/token (default 10 min).
	TokenTTL time.Duration
	// Retry is the reconnection delay suggested to clients (default 2 s).
	Retry time.Duration
}

func (c *RealtimeConfig) setDefaults() {
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.TokenTTL <= 0 {
		c.TokenTTL = 10 * time.Minute
	}
	if c.Retry <= 0 {
		c.Retry = 2 * time.Second
	}
}

func (s *server) handleRealtimeToken() http.HandlerFunc {
	type response struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		c := claimsFrom(r.Context())
		tok, exp, err := s.tokens.signRealtime(c.Subject, c.Name, s.Realtime.TokenTTL)
		if err != nil {
			writeError(w, r, http.StatusInternalServerError, "internal", "cannot sign token", "")
			return
		}
		encode(w, http.StatusOK, response{Token: tok, ExpiresAt: exp})
	}
}

// streamClaims authenticates a stream: a realtime token in ?token= (a bearer token there
// is refused: it would sit in URLs and logs), or a bearer token in the header.
func (s *server) streamClaims(r *http.Request) (*Claims, error) {
	if raw := r.URL.Query().Get("token"); raw != "" {
		return s.tokens.realtime(raw)
	}
	if raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return s.tokens.bearer(strings.TrimSpace(raw))
	}
	return nil, errors.New("missing token")
}

func (s *server) handleRealtimeLeaderboard() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		claims, err := s.streamClaims(r)
		if err != nil {
			writeError(w, r, http.StatusUnauthorized, "unauthorized", "a valid realtime token is required (GET /v1/realtime/token)", "")
			return
		}
		boardID := r.URL.Query().Get("board")
		if boardID == "" {
			boardID = globalBoard
		}
		board, ok := s.Config.Board(boardID)
		if !ok {
			writeError(w, r, http.StatusNotFound, "not_found", "unknown board", "")
			return
		}
		lastID := int64(-1) // a fresh client gets the snapshot, even of an empty board
		if raw := r.Header.Get("Last-Event-ID"); raw != "" {
			if id, err := strconv.ParseInt(raw, 10, 64); err == nil {
				lastID = id
			}
		}

		c, err := s.Hub.register(claims.Subject, board.ID+":"+board.Period, lastID)
		if err != nil {
			w.Header().Set("Retry-After", "5")
			writeError(w, r, http.StatusServiceUnavailable, "too_many_streams", err.Error(), "")
			return
		}
		defer s.Hub.unregister(c)
		// The snapshot is read after registering, so no update can fall in between.
		snap, err := s.Hub.snapshot(r.Context(), board.ID, board.Period)
		if err != nil {
			s.readFailed(w, r, err)
			return
		}
		c.offerTop(snap, s.Hub.cfg.MaxBehind) // queued only if newer than what the client has

		rc := http.NewResponseController(w)
		// The deadline would outlive the stream on a kept-alive connection.
		defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		var buf bytes.Buffer
		fmt.Fprintf(&buf, "retry: %d\n: connected\n\n", s.Realtime.Retry.Milliseconds())
		if !s.writeStream(w, rc, &buf) {
			return
		}
		heartbeat := time.NewTicker(s.Realtime.Heartbeat)
		defer heartbeat.Stop()
		var later <-chan time.Time
		for {
			select {
			case <-r.Context().Done():
				return
			case <-s.Hub.done:
				return
			case <-c.gone:
				return
			case <-heartbeat.C:
				buf.WriteString(": heartbeat\n\n")
			case <-later:
				later = nil
			case <-c.wake:
			}
			top, users, wait := c.take(s.Hub.cfg.Window)
			if wait > 0 && later == nil {
				later = time.After(wait)
			}
			for _, f := range users {
				buf.WriteString("event: user.rank.updated\ndata: ")
				buf.Write(f.data)
				buf.WriteString("\n\n")
				s.Hub.sent.WithLabelValues("user.rank.updated").Inc()
			}
			if top != nil {
				fmt.Fprintf(&buf, "id: %d\nevent: leaderboard.updated\ndata: ", top.version)
				buf.Write(top.data)
				buf.WriteString("\n\n")
				s.Hub.sent.WithLabelValues("leaderboard.updated").Inc()
			}
			if buf.Len() > 0 && !s.writeStream(w, rc, &buf) {
				s.Hub.dropped.Inc()
				return
			}
		}
	}
}

// writeStream writes and flushes buf within the write timeout, then empties it.
func (s *server) writeStream(w http.ResponseWriter, rc *http.ResponseController, buf *bytes.Buffer) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(s.Realtime.WriteTimeout))
	_, err := w.Write(buf.Bytes())
	if err == nil {
		err = rc.Flush()
	}
	buf.Reset()
	return err == nil
}
