package main

import (
	"context"
	kbin "encoding/binary"
	"io"
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

// fakeBroker answers every request it reads with a response header carrying the
// request's correlation id (what a Kafka broker does for ApiVersions of any version).
func fakeBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var size [4]byte
				if _, err := io.ReadFull(c, size[:]); err != nil {
					return
				}
				req := make([]byte, kbin.BigEndian.Uint32(size[:]))
				if _, err := io.ReadFull(c, req); err != nil {
					return
				}
				resp := kbin.BigEndian.AppendUint32(nil, 4+2+4) // correlation id, error code, empty array
				resp = append(resp, req[4:8]...)
				resp = kbin.BigEndian.AppendUint16(resp, 0)
				resp = kbin.BigEndian.AppendUint32(resp, 0)
				_, _ = c.Write(resp)
			}()
		}
	}()
	return ln.Addr().String()
}

// hungBroker accepts connections (as the kernel does for a frozen broker) and never
// answers.
func hungBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestKafkaProbeAsksTheOtherBrokersWhenOneHangs: LEADERBOARD_KAFKA_BROKERS
// names several brokers; one of them hangs (a frozen VM, a partition), the others
// answer, and sarama's clients carry on with them. /readyz must not name kafka (a probe
// asking the brokers one after the other let the first, hung one spend all of /readyz's
// 2 s). And with every broker hung, it does.
func TestKafkaProbeAsksTheOtherBrokersWhenOneHangs(t *testing.T) {
	good := fakeBroker(t)
	hung := hungBroker(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if !kafkaAnswers(ctx, []string{good}) {
		t.Fatal("the answering fake broker alone is not taken as answering: the fake is wrong")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second) // as /readyz
	defer cancel2()
	start := time.Now()
	if !kafkaAnswers(ctx2, []string{hung, good}) {
		t.Errorf("brokers [hung, answering]: kafkaAnswers = false after %v, want true (the second broker answers; /readyz names kafka and takes the whole process, API included, out of service)",
			time.Since(start).Round(time.Millisecond))
	}
	ctx3, cancel3 := context.WithTimeout(context.Background(), time.Second)
	defer cancel3()
	if kafkaAnswers(ctx3, []string{hung, hungBroker(t)}) {
		t.Error("brokers [hung, hung]: kafkaAnswers = true, want false")
	}
}

// TestReadyzProbesShareOneCheck: /readyz asks no credentials and each check takes a
// PostgreSQL connection (and a new connection to the broker with the relay or the
// projector): 150 anonymous clients held the pool's every connection, and players' reads
// and writes waited up to 7 s for one (found by a review). Probes that come while a check
// runs share its answer: one check at a time, however many probe.
func TestReadyzProbesShareOneCheck(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	pgURL, _ := url.Parse(env.vars["LEADERBOARD_POSTGRES_URL"])
	pgURL.Path = "/postgres" // the test's own database is made by a service's start
	pool, err := pgxpool.New(context.Background(), pgURL.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var running, most, runs atomic.Int32
	release := make(chan struct{})
	slow := check{"slow", func() bool {
		runs.Add(1)
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		return false
	}}
	ready := &readiness{pool: pool, boards: storage.NewBoards(env.rdb, env.prefix, 0), checks: []check{slow}}
	var wg sync.WaitGroup
	answers := make(chan []string, 50)
	for range 50 {
		wg.Go(func() { answers <- ready.Failing(context.Background()) })
	}
	eventually(t, 10*time.Second, func() string {
		if runs.Load() == 0 {
			return "no check started"
		}
		return ""
	})
	time.Sleep(100 * time.Millisecond) // the other probes arrive meanwhile
	close(release)
	wg.Wait()
	close(answers)
	for a := range answers {
		if !slices.Equal(a, []string{"slow"}) {
			t.Errorf("a probe's answer: %v, want [slow]", a)
		}
	}
	if most.Load() != 1 || runs.Load() > 2 {
		t.Errorf("50 probes at once ran %d checks, %d at a time, want one check (or two, for probes that came as it ended)", runs.Load(), most.Load())
	}
}
