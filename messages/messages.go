// Package messages holds the wire contracts of the pipeline: commands and events,
// JSON-encoded with snake_case fields. It imports nothing but the standard library.
package messages

import (
	"encoding/json"
	"time"
)

// Metadata keys set on every pipeline message.
const (
	// MetaEventID carries the client's (or generated) event id.
	MetaEventID = "event_id"
	// MetaPartitionKey is the Kafka partition key (the user id for score events).
	MetaPartitionKey = "partition_key"
	// MetaCorrelationID follows a request from HTTP through the outbox and Kafka.
	MetaCorrelationID = "correlation_id"
	// MetaOutboxRow names the outbox row the relay forwarded a message from
	// ("shard:transaction id:offset"); the projector deletes that row when it applies the
	// message.
	MetaOutboxRow = "outbox_row"
)

// ScoreSubmitted is the command the API publishes once a score is accepted: apply
// Value to the user's entry of Board/Period with the board's operator. The API decided
// the period when it accepted the command; the pipeline never decides it again.
type ScoreSubmitted struct {
	// Op is empty for a write by the board's operator, or one of the moderation ops:
	// OpAdjust (set the value), OpRemove (delete the entry), OpSync (a user was banned or
	// unbanned: mirror all their entries again; no board, period or value).
	Op       string `json:"op,omitempty"`
	EventID  string `json:"event_id"`
	Board    string `json:"board"`
	Period   string `json:"period"`
	UserID   string `json:"user_id"`
	NickName string `json:"nick_name,omitempty"`
	Value    int64  `json:"value"`
	// Also are more boards the command counts for, each once with the same event id (a
	// match point adds to the match, the day and the season).
	Also []BoardValue `json:"also,omitempty"`
	// Metadata is a JSON object of at most MaxMetadataBytes, kept with the entry the
	// command changes.
	Metadata   json.RawMessage `json:"metadata,omitempty"`
	OccurredAt time.Time       `json:"occurred_at"`
}

// The moderation ops of ScoreSubmitted.
const (
	OpAdjust = "adjust"
	OpRemove = "remove"
	OpSync   = "sync"
)

// BoardValue is one more board (and period) a command's value counts for.
type BoardValue struct {
	Board  string `json:"board"`
	Period string `json:"period"`
	Value  int64  `json:"value"`
}

// MaxMetadataBytes bounds an entry's metadata (a JSON object).
const MaxMetadataBytes = 1024

// LeaderboardChanged is published by the projector when a board's cached top-N changed.
type LeaderboardChanged struct {
	EventID string  `json:"event_id"`
	Board   string  `json:"board"`
	Period  string  `json:"period"`
	Version int64   `json:"version"`
	Entries []Entry `json:"entries"`
	// UpdatedAt is when the top last changed (in Redis).
	UpdatedAt  time.Time `json:"updated_at"`
	OccurredAt time.Time `json:"occurred_at"`
}

// Entry is one ranked row of a board.
type Entry struct {
	Rank      int64           `json:"rank"`
	UserID    string          `json:"user_id"`
	Score     int64           `json:"score"`
	NickName  string          `json:"nick_name,omitempty"`
	UpdatedAt time.Time       `json:"updated_at"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
}

// ScoresApplied is published by the projector after a batch: the users whose entries
// changed on a board, so API processes can tell those users their new score and rank.
type ScoresApplied struct {
	EventID    string    `json:"event_id"`
	Board      string    `json:"board"`
	Period     string    `json:"period"`
	UserIDs    []string  `json:"user_ids"`
	OccurredAt time.Time `json:"occurred_at"`
}
