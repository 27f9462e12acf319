package handlers

import (
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// published is one message a recordingPublisher was given.
type published struct {
	topic, key string
	payload    []byte
}

// recordingPublisher hands every published message to the test.
type recordingPublisher struct{ out chan published }

func (p recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		p.out <- published{topic, m.Metadata.Get(messages.MetaPartitionKey), m.Payload}
	}
	return nil
}

func (recordingPublisher) Close() error { return nil }

// TestChangePublisherPublishesOncePerInterval: after a round of notifications, changes
// wait for the interval to end and then go out together, only the newest top of a board;
// Close publishes what waits without waiting for the interval.
func TestChangePublisherPublishesOncePerInterval(t *testing.T) {
	pub := recordingPublisher{out: make(chan published, 100)}
	waits := make(chan time.Duration, 10)
	tick := make(chan time.Time)
	after := func(d time.Duration) <-chan time.Time { waits <- d; return tick }
	c := newChangePublisher(pub, "tops", "users", 100*time.Millisecond, after, slog.New(slog.DiscardHandler))
	top := func(v int64) storage.Top {
		return storage.Top{Version: v, Entries: []storage.Entry{{Rank: 1, UserID: "u1", Score: v}}}
	}
	next := func() published {
		t.Helper()
		select {
		case p := <-pub.out:
			return p
		case <-time.After(5 * time.Second):
			t.Fatal("nothing published")
			return published{}
		}
	}
	version := func(p published) int64 {
		t.Helper()
		var ev messages.LeaderboardChanged
		if err := json.Unmarshal(p.payload, &ev); err != nil || p.topic != "tops" {
			t.Fatalf("want a top on topic tops, got %s %s (%v)", p.topic, p.payload, err)
		}
		return ev.Version
	}
	waitStarted := func() {
		t.Helper()
		select {
		case d := <-waits:
			if d != 100*time.Millisecond {
				t.Fatalf("waited %s, want the interval", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the publisher did not wait for the interval after a round")
		}
	}

	c.TopChanged("global", "all_time", top(1))
	if v := version(next()); v != 1 {
		t.Fatalf("first round: version %d, want 1 at once", v)
	}
	waitStarted()
	// Within the interval: nothing goes out, the newer top replaces the older one.
	c.TopChanged("global", "all_time", top(2))
	c.TopChanged("global", "all_time", top(3))
	c.UsersChanged("global", "all_time", []string{"u1", "u2"})
	c.UsersChanged("global", "all_time", []string{"u2", "u3"})
	if n := len(pub.out); n != 0 {
		t.Fatalf("%d messages published within the interval", n)
	}
	tick <- time.Now()
	users, tops := next(), next()
	var applied messages.ScoresApplied
	if err := json.Unmarshal(users.payload, &applied); err != nil || users.topic != "users" || users.key != "global:all_time" {
		t.Fatalf("want the changed users on topic users, got %s %s %s (%v)", users.topic, users.key, users.payload, err)
	}
	slices.Sort(applied.UserIDs)
	if !slices.Equal(applied.UserIDs, []string{"u1", "u2", "u3"}) {
		t.Fatalf("changed users %v, want u1 u2 u3 in one message", applied.UserIDs)
	}
	if v := version(tops); v != 3 {
		t.Fatalf("after the interval: version %d, want only the newest, 3", v)
	}
	waitStarted()
	if n := len(pub.out); n != 0 {
		t.Fatalf("%d more messages published, want one round", n)
	}
	// Close does not wait for the interval.
	c.TopChanged("global", "all_time", top(4))
	c.Close()
	if v := version(next()); v != 4 {
		t.Fatalf("on Close: version %d, want 4", v)
	}
}
