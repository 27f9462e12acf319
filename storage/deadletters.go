package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
)

// MetaAttempts counts how often a message was poisoned (a requeued one that fails again).
const MetaAttempts = "poison_attempts"

// maxAttempts bounds a dead letter's attempts, as the outbox's upkeep reads them back
// (rowAttempts: at most nine digits); a requeue carries at most one less.
const maxAttempts = 999_999_999

// DeadLetters is a watermill Publisher that stores poisoned messages in the
// dead_letters table. The payload is kept as bytes, so malformed messages fit.
type DeadLetters struct {
	pool *pgxpool.Pool
}

// NewDeadLetters returns the dead-letter store.
func NewDeadLetters(pool *pgxpool.Pool) *DeadLetters { return &DeadLetters{pool: pool} }

// Publish stores the messages; the topic argument is the poison topic and is not kept.
func (d *DeadLetters) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		clean := make(map[string]string, len(m.Metadata))
		for k, v := range m.Metadata {
			clean[cleanText(k)] = cleanText(v)
		}
		meta, err := json.Marshal(clean)
		if err != nil {
			return fmt.Errorf("dead letter metadata: %w", err)
		}
		// A requeued message carries the attempts of its earlier poisonings. Another
		// producer's header may say anything: one out of range counts none (clamped to the
		// cap, a duplicate dead letter of it would look newer than its twin's requeue).
		attempts, _ := strconv.Atoi(m.Metadata.Get(MetaAttempts))
		if attempts < 0 || attempts > maxAttempts-2 {
			attempts = 0
		}
		var eventID, userID *string
		if id := cleanText(m.Metadata.Get("event_id")); id != "" {
			eventID = &id
		}
		if id := cleanText(m.Metadata.Get(metaPartitionKey)); id != "" {
			userID = &id
		}
		ctx := context.WithoutCancel(m.Context())
		_, err = d.pool.Exec(ctx, `
			INSERT INTO dead_letters (uuid, event_id, user_id, payload, metadata, reason, topic, handler, subscriber, attempts)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			cleanText(m.UUID), eventID, userID, []byte(m.Payload), meta, clean[middleware.ReasonForPoisonedKey], clean[middleware.PoisonedTopicKey],
			clean[middleware.PoisonedHandlerKey], clean[middleware.PoisonedSubscriberKey], attempts+1)
		if err != nil {
			return unavailable("store dead letter", err)
		}
	}
	return nil
}

// Close does nothing: the pool belongs to the caller.
func (d *DeadLetters) Close() error { return nil }

// cleanText makes a string storable in a TEXT or JSONB column: valid UTF-8, no NUL.
func cleanText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
