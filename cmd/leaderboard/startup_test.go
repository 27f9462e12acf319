package main

import (
	"bytes"
	"context"
	be "encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

// startRaw runs the service with overrides without waiting for it to be ready; it
// returns its base URL, its logs, its exit and its cancel (also called at cleanup).
func startRaw(t *testing.T, env *testEnv, overrides map[string]string) (string, *storagetest.SyncBuffer, chan error, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &storagetest.SyncBuffer{}
	done := make(chan error, 1)
	getenv := env.getenv(overrides)
	go func() { done <- runWith(ctx, nil, getenv, logs, time.Now) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	})
	return "http://" + getenv("LEADERBOARD_HTTP_ADDR"), logs, done, cancel
}

// TestHealthzAnswersWhileStarting: README: "GET /healthz answers while the process
// lives". A process still starting (here PostgreSQL does not answer yet: a slow failover,
// a long migration behind a lock) answers /healthz 200, /readyz 503 naming "starting" and
// the API 503 with Retry-After: a liveness probe must not kill a process that is only
// waiting (it once bound its port and served nothing until every dependency opened).
func TestHealthzAnswersWhileStarting(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newHoleProxy(t, testPostgresHost(t))
	px.hole.Store(true)
	pgURL, _ := url.Parse(env.vars["LEADERBOARD_POSTGRES_URL"])
	pgURL.Host = px.addr()
	base, logs, done, _ := startRaw(t, env, map[string]string{"LEADERBOARD_POSTGRES_URL": pgURL.String()})
	client := &http.Client{Timeout: 2 * time.Second}
	var lastErr error
	for start := time.Now(); time.Since(start) < 10*time.Second; {
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("exited: %v\n%s", err, tail(logs.String(), 2000))
		default:
		}
		resp, err := client.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				svc := &service{base: base}
				if r := svc.do(t, "GET", "/readyz", "", ""); r.status != 503 || r.body["status"] != "not_ready" || !strings.Contains(r.raw, `"starting"`) {
					t.Errorf("/readyz while starting: %d %s, want 503 naming starting", r.status, r.raw)
				}
				if r := svc.do(t, "POST", "/healthz", "", ""); r.status == 200 {
					t.Errorf("POST /healthz while starting: 200, want what a GET-only path answers another method (not 200)")
				}
				r := svc.do(t, "GET", "/v1/leaderboard/top", mintToken(t, "early"), "")
				if r.status != 503 || r.body["error_code"] != "dependency_unavailable" || r.header.Get("Retry-After") == "" {
					t.Errorf("the API while starting: %d %s (Retry-After %q), want 503 dependency_unavailable with Retry-After", r.status, r.raw, r.header.Get("Retry-After"))
				}
				return
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		lastErr = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("/healthz never answered 200 in the 10 s the process was starting (waiting for PostgreSQL): last %v", lastErr)
}

func sleepShort() { time.Sleep(200 * time.Millisecond) }

func httpGetStatus(url string) (int, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// refusePostgresDBProxy forwards PostgreSQL connections to target, except that a
// connection whose startup message names the database "postgres" is refused as a server
// whose pg_hba.conf (or REVOKE CONNECT ... FROM PUBLIC) lets the service's role reach its
// own database only: FATAL 42501, as a least-privilege or managed PostgreSQL answers.
func refusePostgresDBProxy(t *testing.T, target string) string {
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
				var hdr [4]byte
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					c.Close()
					return
				}
				body := make([]byte, be.BigEndian.Uint32(hdr[:])-4)
				if _, err := io.ReadFull(c, body); err != nil {
					c.Close()
					return
				}
				// protocol version, then key\0value\0 ... \0
				parts := bytes.Split(body[4:], []byte{0})
				db := ""
				for i := 0; i+1 < len(parts); i += 2 {
					if string(parts[i]) == "database" {
						db = string(parts[i+1])
					}
				}
				if db == "postgres" {
					var msg bytes.Buffer
					for _, f := range []string{"SFATAL", "VFATAL", "C42501", "Mpermission denied for database \"postgres\""} {
						msg.WriteString(f)
						msg.WriteByte(0)
					}
					msg.WriteByte(0)
					out := []byte{'E', 0, 0, 0, 0}
					be.BigEndian.PutUint32(out[1:], uint32(msg.Len()+4))
					_, _ = c.Write(append(out, msg.Bytes()...))
					c.Close()
					return
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				_, _ = up.Write(append(hdr[:], body...))
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// TestStartsWhenOnlyItsOwnDatabaseIsReachable: the service's database exists
// (created by the operator or by a first start) and the role may connect to it, but not to
// the maintenance database "postgres" (least privilege; many managed PostgreSQL services
// and shared clusters). The service must start: it needs "postgres" only to create a
// database that is missing (it once always connected to "postgres" first, and failed).
func TestStartsWhenOnlyItsOwnDatabaseIsReachable(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	first := env.start(nil) // creates and migrates the database
	first.stop(t)
	pgURL, _ := url.Parse(env.vars["LEADERBOARD_POSTGRES_URL"])
	pgURL.Host = refusePostgresDBProxy(t, testPostgresHost(t))
	base, logs, done, _ := startRaw(t, env, map[string]string{"LEADERBOARD_POSTGRES_URL": pgURL.String()})
	svc := &service{base: base}
	for range 100 {
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("the service did not start with its own database reachable and \"postgres\" not: %v\n%s", err, tail(logs.String(), 1500))
		default:
		}
		if st, err := httpGetStatus(base + "/readyz"); err == nil && st == 200 {
			if r := svc.do(t, "GET", "/healthz", "", ""); r.status != 200 {
				t.Fatalf("healthz %d", r.status)
			}
			return
		}
		sleepShort()
	}
	t.Fatalf("not ready\n%s", tail(logs.String(), 1500))
}

// TestStopWhileStartingIsNotAFailure: a process told to stop while it waits for its
// stores (PostgreSQL not answering) returns promptly and without an error: it was asked to
// stop, not failing (it once exited 1 with "context canceled").
func TestStopWhileStartingIsNotAFailure(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	px := newHoleProxy(t, testPostgresHost(t))
	px.hole.Store(true)
	pgURL, _ := url.Parse(env.vars["LEADERBOARD_POSTGRES_URL"])
	pgURL.Host = px.addr()
	base, logs, done, cancel := startRaw(t, env, map[string]string{"LEADERBOARD_POSTGRES_URL": pgURL.String()})
	eventually(t, 10*time.Second, func() string {
		if st, err := httpGetStatus(base + "/healthz"); err != nil || st != 200 {
			return fmt.Sprintf("/healthz %d %v", st, err)
		}
		return ""
	})
	cancel()
	select {
	case err := <-done:
		done <- err // for the cleanup
		if err != nil {
			t.Errorf("stopped while starting: %v, want no error\n%s", err, tail(logs.String(), 1500))
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not stopped 10 s after its context ended while starting\n%s", tail(logs.String(), 1500))
	}
}

// TestTakenPprofAddressFailsTheStart: LEADERBOARD_PPROF_ADDR on a taken port fails the
// start at once, naming it, as a taken API port does (pprof was silently not served).
func TestTakenPprofAddressFailsTheStart(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	env := newTestEnv(t)
	_, _, done, _ := startRaw(t, env, map[string]string{"LEADERBOARD_PPROF_ADDR": ln.Addr().String()})
	select {
	case err := <-done:
		done <- err
		if err == nil || !strings.Contains(err.Error(), "LEADERBOARD_PPROF_ADDR") || !strings.Contains(err.Error(), ln.Addr().String()) {
			t.Errorf("start with a taken pprof address: %v, want an error naming LEADERBOARD_PPROF_ADDR and %s", err, ln.Addr())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the start with a taken pprof address did not fail")
	}
}

// TestPprofAnswersLoopbackHostsOnly: pprof asks no credentials, so its listener refuses a
// request naming another host (a page whose name was rebound to 127.0.0.1 would read
// goroutine stacks and heap profiles, or start CPU profiles, from a developer's browser)
// and one a proxy forwarded, and still answers one for 127.0.0.1 or localhost.
func TestPprofAnswersLoopbackHostsOnly(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	port := freePort(t)
	addr := "127.0.0.1:" + port
	env.start(map[string]string{"LEADERBOARD_PPROF_ADDR": addr})
	get := func(host string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/debug/pprof/goroutine?debug=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, host := range []string{"rebind.attacker.example:" + port, "rebind.attacker.example", "10.0.0.1:" + port} {
		if st, body := get(host); st != http.StatusForbidden || !strings.Contains(body, `"error_code":"forbidden"`) {
			t.Errorf("pprof for Host %q: %d %.120q, want 403 forbidden", host, st, body)
		}
	}
	if st, body := get(addr, "X-Forwarded-For", "203.0.113.7"); st != http.StatusForbidden {
		t.Errorf("pprof for a forwarded request: %d %.120q, want 403", st, body)
	}
	for _, host := range []string{addr, "localhost:" + port} {
		if st, body := get(host); st != http.StatusOK || !strings.Contains(body, "goroutine") {
			t.Errorf("pprof for Host %q: %d %.120q, want 200 with goroutines", host, st, body)
		}
	}
}

// TestStopWhileKafkaHangsAtStart: the broker accepts connections and never answers while
// the process (relay and projector) creates its topics. Told to stop, it returns promptly
// and without an error: sarama's admin takes no context, and its requests, retried, each
// wait out a read timeout (the stop once waited minutes for them).
func TestStopWhileKafkaHangsAtStart(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	base, logs, done, cancel := startRaw(t, env, map[string]string{"LEADERBOARD_KAFKA_BROKERS": hungBroker(t)})
	eventually(t, 10*time.Second, func() string {
		if st, err := httpGetStatus(base + "/readyz"); err != nil || st != 503 {
			return fmt.Sprintf("/readyz %d %v, want 503 starting", st, err)
		}
		return ""
	})
	time.Sleep(time.Second) // in the topics' creation by now (PostgreSQL and Redis answer at once)
	cancel()
	select {
	case err := <-done:
		done <- err // for the cleanup
		if err != nil {
			t.Errorf("stopped while Kafka hung at start: %v, want no error\n%s", err, tail(logs.String(), 1500))
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not stopped 10 s after its context ended while Kafka hung at start\n%s", tail(logs.String(), 1500))
	}
}
