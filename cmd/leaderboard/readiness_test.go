package main

import (
	"context"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openleaderboard/leaderboard/storage"
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

// TestReadyzNamesOnlyTheStoreThatIsDown: PostgreSQL stops answering (black-holed) while
// Redis is fine. The readiness check must name postgres, and only what is actually down:
// an operator reading ["postgres","redis","kafka"] goes looking at three outages (the
// checks once ran one after the other on one 2 s context, which the PostgreSQL ping
// spent).
func TestReadyzNamesOnlyTheStoreThatIsDown(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newHoleProxy(t, testPostgresHost(t))
	px.hole.Store(true)
	pgURL, _ := url.Parse(env.vars["LEADERBOARD_POSTGRES_URL"])
	pgURL.Host = px.addr()
	pgURL.Path = "/postgres"
	pool, err := pgxpool.New(context.Background(), pgURL.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ready := &readiness{pool: pool, boards: storage.NewBoards(env.rdb, env.prefix, 0)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // as /readyz
	defer cancel()
	if got := ready.failing(ctx); !slices.Equal(got, []string{"postgres"}) {
		t.Errorf("readiness with PostgreSQL black-holed (Redis up): failing %v, want [postgres]", got)
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
