package handlers

import (
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// ChangePublisher publishes LeaderboardChanged and ScoresApplied off the projector's hot
// path. It keeps only the newest top of each board and period, so a slow broker delays
// notifications and coalesces them, but never holds up applying scores. Notifications are
// best effort: the top is in Redis already, and a lost one only delays a push.
//
// It publishes at most once per interval: what changes meanwhile goes out together when
// the interval is over. Under load this turns one round of produce requests per projector
// batch (and a wake-up of every realtime consumer) into a few per second; the realtime
// streams coalesce to one snapshot per 250 ms anyway.
type ChangePublisher struct {
	pub        message.Publisher
	topic      string
	usersTopic string
	logger     *slog.Logger
	maxPending int
	interval   time.Duration
	after      func(time.Duration) <-chan time.Time

	mu      sync.Mutex
	pending map[string]messages.LeaderboardChanged
	users   map[boardPeriod]map[string]bool // users whose entries changed, by board period
	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}
}

// NotifyInterval is the shortest time between two rounds of notifications.
const NotifyInterval = 100 * time.Millisecond

// NewChangePublisher publishes tops to topic and changed users to usersTopic (not at all
// when empty) through pub, at most once per NotifyInterval, until Close.
func NewChangePublisher(pub message.Publisher, topic, usersTopic string, logger *slog.Logger) *ChangePublisher {
	return newChangePublisher(pub, topic, usersTopic, NotifyInterval, time.After, logger)
}

func newChangePublisher(pub message.Publisher, topic, usersTopic string, interval time.Duration, after func(time.Duration) <-chan time.Time, logger *slog.Logger) *ChangePublisher {
	c := &ChangePublisher{
		pub: pub, topic: topic, usersTopic: usersTopic, logger: logger, maxPending: 100_000, interval: interval, after: after,
		pending: map[string]messages.LeaderboardChanged{}, users: map[boardPeriod]map[string]bool{},
		wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{}),
	}
	go c.run()
	return c
}

// TopChanged queues the board's new top, replacing an older one not yet published.
func (c *ChangePublisher) TopChanged(board, period string, top storage.Top) {
	ev := messages.LeaderboardChanged{
		EventID: watermill.NewUUID(), Board: board, Period: period, Version: top.Version, UpdatedAt: top.UpdatedAt, OccurredAt: time.Now().UTC(),
		Entries: make([]messages.Entry, len(top.Entries)),
	}
	for i, e := range top.Entries {
		ev.Entries[i] = messages.Entry{Rank: e.Rank, UserID: e.UserID, Score: e.Score, NickName: e.NickName, UpdatedAt: e.UpdatedAt, Metadata: e.Metadata}
	}
	key := board + ":" + period
	c.mu.Lock()
	if cur, ok := c.pending[key]; !ok || cur.Version < ev.Version {
		c.pending[key] = ev
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// boardPeriod names a board period: a board's key (match:{id} for a match) and a period.
type boardPeriod struct{ board, period string }

// UsersChanged queues the users whose entries a batch changed on a board. Past maxPending
// users waiting, new ones are dropped (their streams still see the top-N).
func (c *ChangePublisher) UsersChanged(board, period string, users []string) {
	if c.usersTopic == "" || len(users) == 0 {
		return
	}
	key := boardPeriod{board, period}
	c.mu.Lock()
	set := c.users[key]
	if set == nil {
		set = map[string]bool{}
		c.users[key] = set
	}
	for _, u := range users {
		if len(set) < c.maxPending {
			set[u] = true
		}
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *ChangePublisher) run() {
	defer close(c.stopped)
	for {
		select {
		case <-c.wake:
		case <-c.done:
			c.flush()
			return
		}
		c.flush()
		// Changes queued meanwhile leave their wake-up in the channel for the next round.
		select {
		case <-c.after(c.interval):
		case <-c.done:
			c.flush()
			return
		}
	}
}

func (c *ChangePublisher) flush() {
	c.mu.Lock()
	batch, users := c.pending, c.users
	c.pending, c.users = map[string]messages.LeaderboardChanged{}, map[boardPeriod]map[string]bool{}
	c.mu.Unlock()
	for key, set := range users {
		// The board, not a key split again: a match board's id has a colon of its own.
		ev := messages.ScoresApplied{EventID: watermill.NewUUID(), Board: key.board, Period: key.period, OccurredAt: time.Now().UTC()}
		for u := range set {
			ev.UserIDs = append(ev.UserIDs, u)
		}
		c.publish(c.usersTopic, key.board+":"+key.period, ev.EventID, ev)
	}
	for key, ev := range batch {
		c.publish(c.topic, key, ev.EventID, ev)
	}
}

func (c *ChangePublisher) publish(topic, key, id string, ev any) {
	body, err := json.Marshal(ev)
	if err != nil {
		c.logger.Error("marshal notification", "topic", topic, "err", err)
		return
	}
	msg := message.NewMessage(id, body)
	msg.Metadata.Set(messages.MetaPartitionKey, key)
	if err := c.pub.Publish(topic, msg); err != nil {
		c.logger.Warn("publish notification failed", "topic", topic, "key", key, "err", err)
	}
}

// Close publishes what is pending and stops; it does not close the publisher.
func (c *ChangePublisher) Close() {
	close(c.done)
	<-c.stopped
}
