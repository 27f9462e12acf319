package main

import (
	"context"
	"net"

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

// failing returns the names of the parts that are not ready.
func (r *readiness) failing(ctx context.Context) []string {
	var failing []string
	if err := r.pool.Ping(ctx); err != nil {
		failing = append(failing, "postgres")
	}
	if err := r.boards.Ping(ctx); err != nil {
		failing = append(failing, "redis")
	}
	if len(r.brokers) > 0 && !kafkaReachable(ctx, r.brokers) {
		failing = append(failing, "kafka")
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

func kafkaReachable(ctx context.Context, brokers []string) bool {
	var d net.Dialer
	for _, b := range brokers {
		if c, err := d.DialContext(ctx, "tcp", b); err == nil {
			c.Close()
			return true
		}
	}
	return false
}
