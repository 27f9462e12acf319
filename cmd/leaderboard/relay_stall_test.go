package main

import (
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stallProxy is a TCP proxy whose open connections can be black-holed, as a network
// partition or a PostgreSQL failover leaves them: the bytes sent on them are never
// answered, and nothing closes them; connections opened afterwards go through. A side
// that closes its end still closes the other one (PostgreSQL then ends the session).
type stallProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	pairs  []*stallPair
}

type stallPair struct {
	stalled atomic.Bool
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			pair := &stallPair{}
			p.mu.Lock()
			p.pairs = append(p.pairs, pair)
			p.mu.Unlock()
			t.Cleanup(func() { c.Close(); up.Close() })
			copyStalling := func(dst, src net.Conn) {
				defer dst.Close()
				defer src.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 && !pair.stalled.Load() {
						if _, werr := dst.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil { // io.EOF or a closed socket: close the other side too
						return
					}
				}
			}
			go copyStalling(up, c)
			go copyStalling(c, up)
		}
	}()
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

// stallOpen black-holes every connection open now.
func (p *stallProxy) stallOpen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pair := range p.pairs {
		pair.stalled.Store(true)
	}
}

// TestRelaySurvivesABlackHoledConnection: PostgreSQL's open connections stop answering
// (a network partition, a failover that moved the server's address) while new
// connections work. The API and the projector recover within their statement timeouts;
// a score accepted afterwards is applied within a minute: the relay's calls on its claim's
// connection time out, and it drops the session and claims the shard again. (They had no
// deadline: the relay waited on the dead connection, here forever, on a real network until
// TCP gives up, about 15 minutes. Found by a review.)
func TestRelaySurvivesABlackHoledConnection(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newStallProxy(t, testPostgresHost(t))
	pgURL, _ := url.Parse(env.vars["LEADERBOARD_POSTGRES_URL"])
	pgURL.Host = px.addr()
	svc := env.start(map[string]string{"LEADERBOARD_POSTGRES_URL": pgURL.String()})
	srv := mintToken(t, "gs", "server")
	if r := svc.do(t, "POST", "/v1/scores?wait=true", srv, `{"score": 1, "user_id": "before", "event_id": "bh-0"}`); r.status != 200 {
		t.Fatalf("write before: %d %s", r.status, r.raw)
	}
	px.stallOpen()
	// The client retries until the service takes the write (its stalled pooled connections
	// time out and new ones go through).
	accepted := false
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		if r := svc.do(t, "POST", "/v1/scores", srv, `{"score": 7, "user_id": "after", "event_id": "bh-1"}`); r.status == 202 {
			accepted = true
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !accepted {
		t.Fatal("the write was never accepted after the connections stalled")
	}
	acceptedAt := time.Now()
	eventually(t, 60*time.Second, func() string {
		if n := env.count(`SELECT count(*) FROM score_history WHERE user_id = 'after' AND event_id = 'bh-1'`); n != 1 {
			rows := env.count(`SELECT count(*) FROM watermill_score_commands_0 WHERE uuid = 'bh-1'`) +
				env.count(`SELECT count(*) FROM watermill_score_commands_1 WHERE uuid = 'bh-1'`)
			// Rows of it the relay has not passed yet (forwarded rows are at or before its position).
			unforwarded := 0
			for shard := range 2 {
				unforwarded += env.count(fmt.Sprintf(`SELECT count(*) FROM watermill_score_commands_%d o
					LEFT JOIN watermill_offsets_score_commands_%d f ON f.consumer_group = 'leaderboard-relay'
					WHERE o.uuid = 'bh-1' AND (f.consumer_group IS NULL OR (o.transaction_id, o."offset") > (f.last_processed_transaction_id, f.offset_acked))`, shard, shard))
			}
			return fmt.Sprintf("accepted %v ago, not applied (outbox rows of it left: %d, not forwarded by the relay: %d)", time.Since(acceptedAt).Round(time.Second), rows, unforwarded)
		}
		return ""
	})
}
