package storage_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/openleaderboard/leaderboard/storage"
)

func poisonedMessage(uuid, eventID string, payload []byte) *message.Message {
	m := message.NewMessage(uuid, payload)
	m.Metadata.Set("reason_poisoned", "permanent: decode score event: invalid character")
	m.Metadata.Set("topic_poisoned", "leaderboard.scores")
	m.Metadata.Set("handler_poisoned", "apply-score")
	m.Metadata.Set("subscriber_poisoned", "kafka-subscriber")
	m.Metadata.Set("correlation_id", "corr-1")
	if eventID != "" {
		m.Metadata.Set("event_id", eventID)
	}
	return m
}

func TestDeadLettersPublishAndList(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	dl := storage.NewDeadLetters(pool)
	ctx := testContext(t)

	binary := []byte{0xff, 0xfe, 0x00, 'x', 0xc3, 0x28, '{'} // not UTF-8, with a NUL byte
	first := poisonedMessage("uuid-1", "ev-1", binary)
	first.Metadata.Set(storage.MetaAttempts, "3")
	if err := dl.Publish("poison", first); err != nil {
		t.Fatalf("Publish non-UTF-8 payload: %v", err)
	}
	if err := dl.Publish("poison", poisonedMessage("uuid-2", "", []byte(`{"ok":true}`))); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	got, _, err := storage.NewDeadLetterAdmin(stdlib.OpenDBFromPool(pool), storage.NewOutboxSchema(), 1).List(ctx, 10, 0)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("List = %d items, want 2", len(got))
	}
	if got[0].UUID != "uuid-2" || got[1].UUID != "uuid-1" {
		t.Errorf("List order = %s, %s; want newest first", got[0].UUID, got[1].UUID)
	}
	if got[0].EventID != "" {
		t.Errorf("event id of a message without one = %q", got[0].EventID)
	}
	l := got[1]
	if !bytes.Equal(l.Payload, binary) {
		t.Errorf("payload = %x, want %x", l.Payload, binary)
	}
	if l.EventID != "ev-1" || l.Reason != "permanent: decode score event: invalid character" ||
		l.Topic != "leaderboard.scores" || l.Handler != "apply-score" || l.ID <= 0 {
		t.Errorf("dead letter = %+v", l)
	}
	if l.ID >= got[0].ID {
		t.Errorf("ids %d, %d: want increasing with time", l.ID, got[0].ID)
	}

	// The columns List does not return, and the whole metadata, are kept too.
	var subscriber string
	var attempts int
	var meta []byte
	err = pool.QueryRow(ctx, `SELECT subscriber, attempts, metadata FROM dead_letters WHERE uuid = 'uuid-1'`).Scan(&subscriber, &attempts, &meta)
	if err != nil {
		t.Fatal(err)
	}
	if subscriber != "kafka-subscriber" || attempts != 4 { // poisoned 3 times before, now once more
		t.Errorf("subscriber %q attempts %d, want kafka-subscriber 4", subscriber, attempts)
	}
	var md map[string]string
	if err := json.Unmarshal(meta, &md); err != nil {
		t.Fatalf("metadata %s: %v", meta, err)
	}
	for k, v := range first.Metadata {
		if md[k] != v {
			t.Errorf("metadata[%s] = %q, want %q", k, md[k], v)
		}
	}
	var attempts2 int
	if err := pool.QueryRow(ctx, `SELECT attempts FROM dead_letters WHERE uuid = 'uuid-2'`).Scan(&attempts2); err != nil || attempts2 != 1 {
		t.Errorf("attempts without the metadata = %d, %v; want 1", attempts2, err)
	}

	if got, _, err := storage.NewDeadLetterAdmin(stdlib.OpenDBFromPool(pool), storage.NewOutboxSchema(), 1).List(ctx, 1, 0); err != nil || len(got) != 1 || got[0].UUID != "uuid-2" {
		t.Errorf("List(1) = %+v, %v", got, err)
	}
	if err := dl.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Errorf("Close closed the caller's pool: %v", err)
	}
}

// Poison is malformed by nature: Kafka headers are arbitrary bytes and error texts may
// quote the bad input. The poison store must still take it, or the poisoned message is
// redelivered forever and blocks its partition.
func TestDeadLettersPublishMalformedMetadata(t *testing.T) {
	t.Parallel()
	pool := newMigratedPool(t, 1)
	dl := storage.NewDeadLetters(pool)
	tests := []struct {
		name, key, value string
	}{
		{"reason not UTF-8", "reason_poisoned", "decode: bad payload \xff\xfe"},
		{"reason with NUL", "reason_poisoned", "decode: bad payload \x00"},
		{"header with NUL", "x-trace", "a\x00b"},
		{"handler not UTF-8", "handler_poisoned", "apply-\xc3"},
	}
	for i, tt := range tests {
		m := poisonedMessage(fmt.Sprintf("uuid-%d", i), fmt.Sprintf("ev-%d", i), []byte{0xff, 0x00})
		m.Metadata.Set(tt.key, tt.value)
		if err := dl.Publish("poison", m); err != nil {
			t.Errorf("%s: Publish: %v", tt.name, err)
		}
	}
	got, _, err := storage.NewDeadLetterAdmin(stdlib.OpenDBFromPool(pool), storage.NewOutboxSchema(), 1).List(testContext(t), 10, 0)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(got) != len(tests) {
		t.Errorf("List returned %d dead letters, want %d", len(got), len(tests))
	}
	for _, l := range got {
		if !bytes.Equal(l.Payload, []byte{0xff, 0x00}) {
			t.Errorf("%s: payload = %x", l.UUID, l.Payload)
		}
	}
}
