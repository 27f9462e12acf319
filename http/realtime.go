package http

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// RealtimeConfig tunes the SSE endpoint.
type RealtimeConfig struct {
	// Heartbeat is the interval of comment lines on idle streams (default 15 s).
	Heartbeat time.Duration
	// WriteTimeout bounds one write to a client (default 10 s); a client that cannot
	// take an event that long is dropped.
	WriteTimeout time.Duration
	// TokenTTL is the lifetime of tokens from /v1/realtime/token (default 10 min; never more
	// than LEADERBOARD_JWT_MAX_TTL, nor past the expiry of the bearer token they are traded for).
	TokenTTL time.Duration
	// Retry is the reconnection delay suggested to clients (default 2 s).
	Retry time.Duration
	// MoveRetry is how long a stream waits before it reads the new period's snapshot again
	// when the read at a reset failed (default 1 s, doubling to 30 s while it fails).
	MoveRetry time.Duration
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
	if c.MoveRetry <= 0 {
		c.MoveRetry = time.Second
	}
}

func (s *server) handleRealtimeToken() http.HandlerFunc {
	type response struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		c := claimsFrom(r.Context())
		var until time.Time
		if c.ExpiresAt != nil {
			until = c.ExpiresAt.Time
		}
		tok, exp, err := s.tokens.signRealtime(c.Subject, c.Name, s.Realtime.TokenTTL, until)
		if err != nil {
			writeError(w, r, http.StatusInternalServerError, "internal", "cannot sign token", "")
			return
		}
		w.Header().Set("Cache-Control", "no-store") // a credential (RFC 6749 5.1)
		encode(w, http.StatusOK, response{Token: tok, ExpiresAt: exp})
	}
}

// streamClaims authenticates a stream: a realtime token in ?token= (a bearer token there
// is refused: it would sit in URLs and logs), or a bearer token in the header.
func (s *server) streamClaims(r *http.Request) (*Claims, error) {
	if raw := r.URL.Query().Get("token"); raw != "" {
		return s.tokens.realtime(raw)
	}
	if raw, ok := bearerToken(r.Header.Get("Authorization")); ok {
		return s.tokens.bearer(raw)
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
		id := r.URL.Query().Get("board")
		if id == "" {
			id = globalBoard
		}
		b, ok := s.board(w, r, id)
		if !ok {
			return
		}
		// Without a period the stream follows the current one, moving on at each reset.
		raw := r.URL.Query().Get("period")
		follow := raw == "" || raw == "current"
		period, ok := s.period(w, r, b)
		if !ok {
			return
		}
		lastID := int64(-1) // a fresh client gets the snapshot, even of an empty board
		if raw := r.Header.Get("Last-Event-ID"); raw != "" {
			if id, err := strconv.ParseInt(raw, 10, 64); err == nil {
				lastID = id
			}
		}
		subscribe := s.Hub.Subscribe
		if follow && (b.Period == configs.PeriodDaily || b.Period == configs.PeriodWeekly || b.Period == configs.PeriodSeason) {
			subscribe = s.Hub.SubscribeFollowing
		}
		sub, err := subscribe(r.Context(), claims.Subject, b.Key(), period, lastID)
		switch {
		case errors.Is(err, errTooManyStreams), errors.Is(err, errTooManyUserStreams), errors.Is(err, errShuttingDown):
			w.Header().Set("Retry-After", "5")
			writeError(w, r, http.StatusServiceUnavailable, "too_many_streams", err.Error(), "")
			return
		case errors.Is(err, storage.ErrNotFound): // a match without a point yet, as GET /top answers it
			writeError(w, r, http.StatusNotFound, "unknown_board", err.Error(), "")
			return
		case err != nil:
			s.readFailed(w, r, err)
			return
		}
		if r.Method == http.MethodHead { // answered as the GET (a match never played is 404, a full hub 503), without its stream
			sub.Close(false)
			streamHeaders(w)
			w.WriteHeader(http.StatusOK)
			return
		}
		var current func(at time.Time) string
		if follow {
			current = func(at time.Time) string {
				p, err := s.Periods.CurrentAt(r.Context(), b, at)
				if err != nil {
					return sub.Period()
				}
				return p
			}
		}
		// The stream ends when its token does (with the clock skew tokens are checked
		// with): the client reconnects with a new one, as live.js does.
		var until time.Time
		if claims.ExpiresAt != nil {
			until = claims.ExpiresAt.Add(clockSkew)
		}
		failed := false
		defer func() { sub.Close(failed) }()
		failed = !s.writeStream(w, r, sub, current, b, until)
	}
}

func streamHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
}

// writeStream writes the subscription's frames as SSE until the client leaves, the hub
// ends the stream or, by the tokens' clock, until passes (checked at least every
// heartbeat), with a comment line every heartbeat; false when a write failed. When
// current is set, the stream moves to the board's new period at each reset.
func (s *server) writeStream(w http.ResponseWriter, r *http.Request, sub *Subscription, current func(at time.Time) string, b configs.Board, until time.Time) bool {
	rc := http.NewResponseController(w)
	// The deadline would outlive the stream on a kept-alive connection.
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	streamHeaders(w)
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "retry: %d\n: connected\n\n", s.Realtime.Retry.Milliseconds())
	heartbeat := time.NewTicker(s.Realtime.Heartbeat)
	defer heartbeat.Stop()
	var later, reset, again <-chan time.Time
	// A move whose snapshot read failed follows the new period already (its updates come)
	// but the client has nothing of it yet: the read is tried again, backing off.
	moveFailed, backoff := false, s.Realtime.MoveRetry
	for {
		if !until.IsZero() && s.tokens.now().After(until) {
			return true
		}
		if current != nil {
			now := s.Periods.Now() // the period and its reset of one instant
			if p := current(now); p != sub.Period() || moveFailed && again == nil {
				if err := sub.Move(r.Context(), p); err != nil {
					s.Logger.Warn("realtime stream could not read the snapshot of the new period; trying again", "board", b.Key(), "period", p, "err", err, "in", backoff)
					moveFailed, again = true, time.After(backoff)
					backoff = min(2*backoff, 30*time.Second)
				} else {
					moveFailed, again, backoff = false, nil, s.Realtime.MoveRetry
				}
			}
			if at, ok := s.Periods.NextResetAt(b, now); ok && reset == nil {
				reset = time.After(max(time.Until(at), 0) + 10*time.Millisecond)
			}
		}
		frames, wait := sub.Frames()
		for _, f := range frames {
			if f.ID != "" {
				fmt.Fprintf(&buf, "id: %s\n", f.ID)
			}
			fmt.Fprintf(&buf, "event: %s\ndata: ", f.Event)
			buf.Write(f.Data)
			buf.WriteString("\n\n")
		}
		if wait > 0 && later == nil {
			later = time.After(wait)
		}
		if buf.Len() > 0 && !s.flush(w, rc, &buf) {
			return false
		}
		select {
		case <-r.Context().Done():
			return true
		case <-sub.Done():
			return true
		case <-heartbeat.C:
			buf.WriteString(": heartbeat\n\n")
		case <-later:
			later = nil
		case <-reset:
			reset = nil
		case <-again:
			again = nil
		case <-sub.Ready():
		}
	}
}

// flush writes and flushes buf within the write timeout, then empties it.
func (s *server) flush(w http.ResponseWriter, rc *http.ResponseController, buf *bytes.Buffer) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(s.Realtime.WriteTimeout))
	_, err := w.Write(buf.Bytes())
	if err == nil {
		err = rc.Flush()
	}
	buf.Reset()
	return err == nil
}
