package storage_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// TestRelayReadNamesEachRow: every message a claim reads names its outbox row (shard,
// transaction id, offset) in its metadata, under the key the projector reads.
func TestRelayReadNamesEachRow(t *testing.T) {
	t.Parallel()
	if storage.MetaOutboxRow != messages.MetaOutboxRow {
		t.Fatalf("storage names the row under %q, the projector reads %q", storage.MetaOutboxRow, messages.MetaOutboxRow)
	}
	f := newRelayFixture(t)
	ctx := testContext(t)
	claim, err := f.maint.Claim(ctx, 0)
	if err != nil || claim == nil {
		t.Fatalf("Claim = %v, %v", claim, err)
	}
	defer claim.Close()
	msgs := readAll(t, claim, len(f.rows))
	for i, m := range msgs {
		got, ok := storage.ParseOutboxRow(m.Metadata.Get(messages.MetaOutboxRow))
		want := storage.OutboxRow{Shard: 0, TxID: f.rows[i].tx, Offset: f.rows[i].offset}
		if !ok || got != want {
			t.Errorf("message %s names row %q (%+v, %v), want %+v", m.UUID, m.Metadata.Get(messages.MetaOutboxRow), got, ok, want)
		}
	}
}

// readAll reads the claim's shard until it returns n messages: rows are held back while a
// transaction of another test is open anywhere on the server (the relay's rule).
func readAll(t *testing.T, claim storage.OutboxClaim, n int) []*message.Message {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		msgs, _, err := claim.Read(testContext(t), 100)
		if err != nil || len(msgs) > n || time.Now().After(deadline) {
			t.Fatalf("Read = %d messages, %v; want %d", len(msgs), err, n)
		}
		if len(msgs) == n {
			return msgs
		}
	}
}

func TestParseOutboxRow(t *testing.T) {
	t.Parallel()
	r := storage.OutboxRow{Shard: 3, TxID: "18446744073709551615", Offset: 42}
	if got, ok := storage.ParseOutboxRow(r.String()); !ok || got != r {
		t.Errorf("ParseOutboxRow(%q) = %+v, %v; want %+v", r.String(), got, ok, r)
	}
	for _, bad := range []string{"", "1:2", "x:2:3", "-1:2:3", "1:-2:3", "1:+2:3", "1:18446744073709551616:3", "1:2:x", "1:2:3:4"} {
		if got, ok := storage.ParseOutboxRow(bad); ok {
			t.Errorf("ParseOutboxRow(%q) = %+v, want not ok", bad, got)
		}
	}
}

// TestProjectionDeletesTheRowsItApplied: a projection given the outbox deletes, in the
// transaction that applies an event, the outbox row the event names, if the row's uuid is
// the event's id (a redelivered event's row too: it is applied). A row named with another
// event's id, or on a shard out of range, stays; so does every row of a batch that fails,
// and every row when the projection was not given the outbox.
func TestProjectionDeletesTheRowsItApplied(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t)
	ctx := testContext(t)
	users := usersOfShard(t, 0, 5)
	for i := range 5 {
		f.accept(command(fmt.Sprintf("fw-%d", i), users[i], "b"))
	}
	claim, err := storage.NewOutboxMaintenance(f.pool, storage.NewOutboxSchema()).Claim(ctx, 0)
	if err != nil || claim == nil {
		t.Fatalf("Claim = %v, %v", claim, err)
	}
	defer claim.Close()
	msgs := readAll(t, claim, 5)
	rows := map[string]storage.OutboxRow{}
	for _, m := range msgs {
		r, ok := storage.ParseOutboxRow(m.Metadata.Get(messages.MetaOutboxRow))
		if !ok {
			t.Fatalf("message %s names no row: %v", m.UUID, m.Metadata)
		}
		rows[m.UUID] = r
	}
	event := func(i int) storage.ScoreEvent {
		e := incrEvent(fmt.Sprintf("fw-%d", i), users[i], 1, at(i))
		e.Outbox = rows[e.EventID]
		return e
	}
	left := func(want string) {
		t.Helper()
		if got := fmt.Sprint(outboxRows(t, f.pool, 0)); got != want {
			t.Errorf("outbox rows %s, want %s", got, want)
		}
	}

	mustApply(t, storage.NewProjection(f.pool), event(0))
	left("[fw-0 fw-1 fw-2 fw-3 fw-4]")

	p := storage.NewProjection(f.pool).WithOutbox(testShards)
	named := event(2)
	named.Outbox = rows["fw-3"]
	outOfRange := event(3)
	outOfRange.Outbox.Shard = testShards
	mustApply(t, p, event(0), event(1), named, outOfRange)
	left("[fw-2 fw-3 fw-4]")

	failing := func(map[storage.EntryKey]storage.EntryState, []storage.ScoreEvent) ([]storage.EntryState, error) {
		return nil, errors.New("the fold fails")
	}
	if _, err := p.Apply(ctx, []storage.ScoreEvent{event(4)}, failing); err == nil {
		t.Fatal("Apply with a failing fold succeeded")
	}
	left("[fw-2 fw-3 fw-4]")
	mustApply(t, p, event(4), event(4))
	left("[fw-2 fw-3]")
}
