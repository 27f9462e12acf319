package http

import (
	"context"
	"testing"
	"time"
)

// slowLog is a request log whose PostgreSQL is busy: a query waits there before it runs,
// and its answer takes as long to come back. The event id was recorded at acceptedAt.
type slowLog struct {
	appliedLog
	acceptedAt time.Time
	there      time.Duration
}

func (l slowLog) AcceptedAgo(context.Context, string, string) (time.Duration, error) {
	time.Sleep(l.there)
	ago := time.Since(l.acceptedAt) // now() at the statement's start
	time.Sleep(l.there)             // the way back
	return ago, nil
}

// TestClaimedSinceWithABusyPostgres: a copy of a claim took the action's lock; a sibling
// copy, sent at the same time, was accepted 10 ms later. With PostgreSQL taking 100 ms to
// start the query, the sibling is still seen as accepted after the take (the time since
// the take was measured before the query: the take looked later than the sibling's
// acceptance, the lock was given back and a second claim passed inside the cooldown, in a
// busy make test). A claim recorded a cooldown before the take is not.
func TestClaimedSinceWithABusyPostgres(t *testing.T) {
	took := time.Now()
	gw := guarded{cooling: true, tookAt: took, userID: "u", eventID: "e"}
	s := &server{Deps: Deps{Requests: slowLog{acceptedAt: took.Add(10 * time.Millisecond), there: 100 * time.Millisecond}}}
	time.Sleep(20 * time.Millisecond) // the sibling is accepted meanwhile
	if !s.claimedSince(context.Background(), gw) {
		t.Error("a sibling accepted 10 ms after the take, PostgreSQL busy: taken for accepted before it")
	}
	s.Requests = slowLog{acceptedAt: took.Add(-30 * time.Second), there: 100 * time.Millisecond}
	if s.claimedSince(context.Background(), gw) {
		t.Error("a claim recorded 30 s before the take: taken for a sibling")
	}
}
