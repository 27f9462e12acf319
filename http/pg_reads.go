package http

import (
	"context"
	"errors"
	"sync"
	"time"
)

// pgReads bounds the reads a process answers from PostgreSQL (periods Redis does not keep,
// and every read while Redis is down): at most slots at once, and one at a time per user.
// A read of a big closed period can take PostgreSQL hundreds of milliseconds (a friends
// read of 100 users numbers the whole period); without a bound one player's token on 16
// connections kept two PostgreSQL cores busy and made other players' reads of closed days
// five times slower (found by a review). A user's further reads wait for their own first;
// every read waits for a slot at most wait, then is refused: errReadsQueued (429) while the
// user's own read runs, errPostgresReadsBusy (503) while others' do.
type pgReads struct {
	slots chan struct{}
	wait  time.Duration

	mu    sync.Mutex
	users map[string]*userSlot
}

type userSlot struct {
	ch   chan struct{}
	refs int
}

var (
	errReadsQueued       = errors.New("another read of this user from PostgreSQL is still running")
	errPostgresReadsBusy = errors.New("every slot for reads from PostgreSQL is taken")
)

func newPGReads(slots int, wait time.Duration) *pgReads {
	if slots < 1 {
		return nil // unbounded (a Config built without LoadConfig)
	}
	return &pgReads{slots: make(chan struct{}, slots), wait: wait, users: map[string]*userSlot{}}
}

// do runs read once user (empty: no user's own bound) holds a slot.
func (g *pgReads) do(ctx context.Context, user string, read func() error) error {
	if g == nil {
		return read()
	}
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	if user != "" {
		u := g.user(user)
		defer g.leave(user, u)
		select {
		case u.ch <- struct{}{}:
			defer func() { <-u.ch }()
		case <-timer.C:
			return errReadsQueued
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case g.slots <- struct{}{}:
		defer func() { <-g.slots }()
	case <-timer.C:
		return errPostgresReadsBusy
	case <-ctx.Done():
		return ctx.Err()
	}
	return read()
}

func (g *pgReads) user(id string) *userSlot {
	g.mu.Lock()
	defer g.mu.Unlock()
	u := g.users[id]
	if u == nil {
		u = &userSlot{ch: make(chan struct{}, 1)}
		g.users[id] = u
	}
	u.refs++
	return u
}

func (g *pgReads) leave(id string, u *userSlot) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if u.refs--; u.refs == 0 {
		delete(g.users, id)
	}
}
