package main

import (
	"context"
	kbin "encoding/binary"
	"io"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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
}

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
// kernel completes it for a broker that hangs.
func kafkaAnswers(ctx context.Context, brokers []string) bool {
	const clientID = "leaderboard-readyz"
	req := kbin.BigEndian.AppendUint32(nil, uint32(2+2+4+2+len(clientID)))
	req = kbin.BigEndian.AppendUint16(req, 18) // ApiVersions
	req = kbin.BigEndian.AppendUint16(req, 0)  // version 0
	req = kbin.BigEndian.AppendUint32(req, 7)  // correlation id
	req = kbin.BigEndian.AppendUint16(req, uint16(len(clientID)))
	req = append(req, clientID...)
	var d net.Dialer
	for _, b := range brokers {
		c, err := d.DialContext(ctx, "tcp", b)
		if err != nil {
			continue
		}
		if deadline, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(deadline)
		}
		stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
		var resp [8]byte // size, correlation id
		_, err = c.Write(req)
		if err == nil {
			_, err = io.ReadFull(c, resp[:])
		}
		stop()
		c.Close()
		if err == nil && kbin.BigEndian.Uint32(resp[4:]) == 7 {
			return true
		}
	}
	return false
}
