package http

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestAnomalyTextIsStorable: the text of a recorded refusal is made what a PostgreSQL text
// column holds (valid UTF-8 without NUL), whatever a client sent, so that no refusal can
// make PostgreSQL refuse the batch it is written in, and the others with it.
func TestAnomalyTextIsStorable(t *testing.T) {
	a := NewAnomalyRecorder(nil, 4, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	a.Record(storage.Anomaly{Reason: "r\x00", UserID: "x\x00y", Board: "b\xff", EventID: "e\xc3", Detail: "ok é"})
	x := <-a.queue
	for _, f := range []string{x.Reason, x.UserID, x.Board, x.EventID, x.Detail} {
		if !utf8.ValidString(f) || strings.ContainsRune(f, 0) {
			t.Errorf("recorded %q: not storable", f)
		}
	}
	if x.UserID != "x\uFFFDy" || x.Detail != "ok é" {
		t.Errorf("recorded user %q, detail %q", x.UserID, x.Detail)
	}
}
