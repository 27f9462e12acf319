package handlers

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/messages"
)

// TestScoresAppliedNamesMatchBoard: the users' notification of a match board names the
// board match:m-7 and the period all_time (a "board:period" key split at its first colon
// named board "match", period "m-7:all_time". Found by a review).
func TestScoresAppliedNamesMatchBoard(t *testing.T) {
	pub := recordingPublisher{out: make(chan published, 10)}
	c := newChangePublisher(pub, "tops", "users", time.Millisecond, time.After, slog.New(slog.DiscardHandler))
	defer c.Close()
	c.UsersChanged("match:m-7", "all_time", []string{"alice"})
	select {
	case p := <-pub.out:
		var ev messages.ScoresApplied
		if err := json.Unmarshal(p.payload, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Board != "match:m-7" || ev.Period != "all_time" {
			t.Fatalf("ScoresApplied names board %q period %q, want match:m-7 / all_time", ev.Board, ev.Period)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing published")
	}
}
