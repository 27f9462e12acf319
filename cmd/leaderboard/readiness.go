package main

import (
	"context"
	kbin "encoding/binary"
	"io"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/singleflight"

	"github.com/openleaderboard/leaderboard/storage"
)

// readiness answers /readyz: the stores and, for a relay or projector, the broker answer,
// every started role's routers run, and the roles' own checks pass.
type readiness struct {
	pool    *pgxpool.Pool
	boards  *storage.Boards
	brokers []string // nil: Kafka is not a condition (an API-only process)
	routers []func() bool
	checks  []check
	// asking is the check in flight, which every /readyz that comes meanwhile shares.
	asking singleflight.Group
}

// Failing answers /readyz: the parts not ready, as failing finds them. /readyz asks no
// credentials and each check takes a PostgreSQL connection (and, with the relay or the
// projector, a connection to the broker): anonymous probes sent at once held the pool's
// every connection and made players' requests wait for one (found by a review). Probes
// that come while a check runs share its answer, so one check runs at a time; it has its
// own 2 s, not the first asker's, whose hanging up must not fail the others'.
func (r *readiness) Failing(ctx context.Context) []string {
	ch := r.asking.DoChan("", func() (any, error) {
		cctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		return r.failing(cctx), nil
	})
	select {
	case res := <-ch:
		return res.Val.([]string)
	case <-ctx.Done():
		return []string{"timeout"}
	}
}

// readyTimeout bounds one readiness check.
const readyTimeout = 2 * time.Second

// check is a named readiness condition of a role.
type check struct {
	name string
	ok   func() bool
}

// failing returns the names of the parts that are not ready. The stores and the broker are
// asked side by side, each with all of ctx's time: one that hangs does not leave the
// others' checks an expired context, which would name them too.
func (r *readiness) failing(ctx context.Context) []string {
	probes := []check{
		{"postgres", func() bool { return r.pool.Ping(ctx) == nil }},
		{"redis", func() bool { return r.boards.Ping(ctx) == nil }},
	}
	if len(r.brokers) > 0 {
		probes = append(probes, check{"kafka", func() bool { return kafkaAnswers(ctx, r.brokers) }})
	}
	ok := make([]bool, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() { ok[i] = p.ok() })
	}
	wg.Wait()
	var failing []string
	for i, p := range probes {
		if !ok[i] {
			failing = append(failing, p.name)
		}
	}
	for _, running := range r.routers {
		if !running() {
			failing = append(failing, "routers")
			break
		}
	}
	for _, c := range r.checks {
		if !c.ok() {
			failing = append(failing, c.name)
		}
	}
	return failing
}

// kafkaAnswers tells whether a broker answers a Kafka request (ApiVersions v0, which every
// broker answers before anything else) within ctx. A TCP connect alone is not enough: the
// kernel completes it for a broker that hangs. The brokers are asked side by side, so one
// that hangs does not spend the others' time (sarama's clients carry on with those).
func kafkaAnswers(ctx context.Context, brokers []string) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the others stop once one answered
	answered := make(chan bool, len(brokers))
	for _, b := range brokers {
		go func() { answered <- brokerAnswers(ctx, b) }()
	}
	for range brokers {
		if <-answered {
			return true
		}
	}
	return false
}

// brokerAnswers asks one broker ApiVersions v0 and reads the answer's correlation id.
func brokerAnswers(ctx context.Context, broker string) bool {
	const clientID = "leaderboard-readyz"
	req := kbin.BigEndian.AppendUint32(nil, uint32(2+2+4+2+len(clientID)))
	req = kbin.BigEndian.AppendUint16(req, 18) // ApiVersions
	req = kbin.BigEndian.AppendUint16(req, 0)  // version 0
	req = kbin.BigEndian.AppendUint32(req, 7)  // correlation id
	req = kbin.BigEndian.AppendUint16(req, uint16(len(clientID)))
	req = append(req, clientID...)
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", broker)
	if err != nil {
		return false
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	var resp [8]byte // size, correlation id
	if _, err := c.Write(req); err != nil {
		return false
	}
	if _, err := io.ReadFull(c, resp[:]); err != nil {
		return false
	}
	return kbin.BigEndian.Uint32(resp[4:]) == 7
}
