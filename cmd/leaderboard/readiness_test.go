package main

import (
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// holeProxy forwards TCP to target until blackHole is called; from then on every
// connection, open or new, is black-holed (accepted, never answered, never closed): a
// host that stopped answering, as a network partition or a dead VM leaves it.
type holeProxy struct {
	ln    net.Listener
	hole  atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func newHoleProxy(t *testing.T, target string) *holeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holeProxy{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			if p.hole.Load() {
				continue // held open, never read or written
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, up)
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 && !p.hole.Load() {
						if _, werr := dst.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						if !p.hole.Load() {
							dst.Close()
						}
						return
					}
				}
			}
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
	return p
}

func (p *holeProxy) addr() string { return p.ln.Addr().String() }

// TestReadyzNamesOnlyTheStoreThatIsDown: PostgreSQL stops answering (black-holed)
// while Redis and the broker are fine. /readyz must answer 503 naming postgres, and only
// what is actually down: an operator reading {"failing":["postgres","redis","kafka"]}
// goes looking at three outages (the checks once ran one after the other on one 2 s
// context, which the PostgreSQL ping spent).
func TestReadyzNamesOnlyTheStoreThatIsDown(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newHoleProxy(t, testPostgresHost(t))
	pgURL, _ := url.Parse(env.vars["LEADERBOARD_POSTGRES_URL"])
	pgURL.Host = px.addr()
	svc := env.start(map[string]string{"LEADERBOARD_POSTGRES_URL": pgURL.String()})
	px.hole.Store(true)
	// Runs before the service's stop: new connections go through again, so the stop (and
	// the database's drop) does not wait on the black hole.
	t.Cleanup(func() { px.hole.Store(false) })
	var last response
	for range 3 {
		last = svc.do(t, "GET", "/readyz", "", "")
		if last.status == 503 && strings.Contains(last.raw, "postgres") {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if last.status != 503 || !strings.Contains(last.raw, "postgres") {
		t.Fatalf("readyz with PostgreSQL black-holed: %d %s", last.status, last.raw)
	}
	if strings.Contains(last.raw, "redis") || strings.Contains(last.raw, "kafka") {
		t.Errorf("readyz with only PostgreSQL black-holed (Redis and Kafka up) answered %s: it names parts that are fine", strings.TrimSpace(last.raw))
	}
}

// TestReadyzNamesAKafkaThatStoppedAnswering: the broker stops answering (its host
// hangs: here the broker process is frozen with SIGSTOP; the kernel still completes TCP
// handshakes) while the process runs the relay and the projector. README: /readyz answers
// 200 "only when PostgreSQL, Redis and (for a process running the relay or the projector)
// Kafka answer": a TCP connect alone (what it once checked) left /readyz 200 while the
// relay was stuck in a produce and nothing was applied.
func TestReadyzNamesAKafkaThatStoppedAnswering(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	brokerAddr, dataDir := "127.0.0.1:"+freePort(t), t.TempDir()
	kafka := startProcess(t, env, nil, "", "broker", "-addr", brokerAddr, "-data-dir", dataDir)
	waitTCP(t, brokerAddr)
	addr := "127.0.0.1:" + freePort(t)
	startProcess(t, env, map[string]string{"LEADERBOARD_ROLES": "relay,projector", "LEADERBOARD_KAFKA_BROKERS": brokerAddr,
		"LEADERBOARD_HTTP_ADDR": addr}, "http://"+addr, "serve")
	_ = kafka.cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { _ = kafka.cmd.Process.Signal(syscall.SIGCONT) })
	svc := &service{base: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	var last response
	for time.Now().Before(deadline) {
		last = svc.do(t, "GET", "/readyz", "", "")
		if last.status == 503 && strings.Contains(last.raw, "kafka") {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Errorf("readyz 30 s after the broker stopped answering: %d %s", last.status, strings.TrimSpace(last.raw))
}
