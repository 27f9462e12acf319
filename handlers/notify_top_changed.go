package handlers

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/openleaderboard/leaderboard/messages"
)

// RealtimeFeed is what the notification handlers feed: the SSE hub of this process.
type RealtimeFeed interface {
	PublishTop(board, period string, version int64, updatedAt time.Time, entries []messages.Entry)
	UsersChanged(ctx context.Context, board, period string, users []string)
}

// NotifyTopChanged hands every LeaderboardChanged to the process's realtime hub.
// Notifications are best effort: a malformed one is logged and skipped.
type NotifyTopChanged struct {
	Feed   RealtimeFeed
	Logger *slog.Logger
}

// Handle is the watermill handler function.
func (n NotifyTopChanged) Handle(msg *message.Message) error {
	var ev messages.LeaderboardChanged
	if err := json.Unmarshal(msg.Payload, &ev); err != nil || ev.Board == "" {
		n.Logger.Warn("skipping malformed LeaderboardChanged", "uuid", msg.UUID, "err", err)
		return nil
	}
	n.Feed.PublishTop(ev.Board, ev.Period, ev.Version, ev.UpdatedAt, ev.Entries)
	return nil
}

// NotifyScoresApplied tells the hub which users' entries changed, so their own streams
// get their new score and rank.
type NotifyScoresApplied struct {
	Feed   RealtimeFeed
	Logger *slog.Logger
}

// Handle is the watermill handler function.
func (n NotifyScoresApplied) Handle(msg *message.Message) error {
	var ev messages.ScoresApplied
	if err := json.Unmarshal(msg.Payload, &ev); err != nil || ev.Board == "" {
		n.Logger.Warn("skipping malformed ScoresApplied", "uuid", msg.UUID, "err", err)
		return nil
	}
	n.Feed.UsersChanged(msg.Context(), ev.Board, ev.Period, ev.UserIDs)
	return nil
}
