package http

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestEncodeAcceptedIsEncode: the accepted answer's hand-written JSON is what encode
// (encoding/json) writes, for event ids with HTML characters, quotes, control characters,
// non-ASCII and invalid UTF-8 as well as plain ones.
func TestEncodeAcceptedIsEncode(t *testing.T) {
	type accepted struct {
		EventID          string `json:"event_id"`
		Status           string `json:"status"`
		ProcessedEventID string `json:"processed_event_id,omitempty"`
	}
	ids := []string{"", "e-1", "0b9c6c9e-4f1e-4c43-9a53-6f1f0c7e2a10", `a"b`, `a\b`, "<script>", "a&b", "tab\there",
		"\x00\x1f\x7f", "é", "\u2028\u2029", "\xff\xfe", "~!#$%'()*+,-./:;=?@[]^_`{|}"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		ids = append(ids, string(b))
	}
	for _, id := range ids {
		for _, processed := range []bool{false, true} {
			want := accepted{EventID: id, Status: "accepted"}
			if processed {
				want.ProcessedEventID = id
			}
			a, b := httptest.NewRecorder(), httptest.NewRecorder()
			encodeAccepted(a, id, processed)
			encode(b, http.StatusAccepted, want)
			if a.Code != b.Code || a.Body.String() != b.Body.String() || a.Header().Get("Content-Type") != b.Header().Get("Content-Type") {
				t.Fatalf("id %q processed %v: got %d %q %q, encode writes %d %q %q", id, processed,
					a.Code, a.Header().Get("Content-Type"), a.Body.String(), b.Code, b.Header().Get("Content-Type"), b.Body.String())
			}
		}
	}
}

// randomEntries makes entry views with the values the hand-written encoders must spell
// as encoding/json does: strings with characters it escapes, metadata with spaces and
// HTML characters (or not valid JSON), times in other zones, with and without
// nanoseconds, and years it refuses.
func randomEntries(r *rand.Rand, n int) []entryView {
	strs := []string{"", "u-1", "Zoë", `a"b`, "<b>&", "\u2028", "\xff", "tab\t"}
	metas := []json.RawMessage{nil, json.RawMessage(`{"car":"red"}`), json.RawMessage(` { "a" : [1, 2, "<&>"] } `),
		json.RawMessage("\"\u2028\""), json.RawMessage(`{"a":`)}
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+1800), time.FixedZone("y", -7*3600)}
	out := make([]entryView, n)
	for i := range out {
		t := time.Unix(r.Int64N(4_000_000_000), 0).In(zones[r.IntN(len(zones))])
		switch r.IntN(6) {
		case 0:
			t = t.Add(time.Duration(r.IntN(1_000_000_000)))
		case 1:
			t = t.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
		}
		if r.IntN(200) == 0 {
			t = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
		}
		meta := metas[0]
		if r.IntN(4) == 0 {
			meta = metas[r.IntN(len(metas))]
		}
		if r.IntN(50) == 0 {
			meta = metas[len(metas)-1] // not valid JSON
		}
		out[i] = entryView{Rank: r.Int64N(1 << 40), UserID: strs[r.IntN(len(strs))], Score: r.Int64() - r.Int64(),
			NickName: strs[r.IntN(len(strs))], UpdatedAt: t, Metadata: meta}
	}
	return out
}

// TestEncodeReadsIsEncode: the top's and a user's answers, written by hand, are what
// encode (encoding/json) writes for the same values, also for values only encoding/json
// handles (the hand-written path then hands them to it).
func TestEncodeReadsIsEncode(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	same := func(what string, a, b *httptest.ResponseRecorder) {
		t.Helper()
		if a.Code != b.Code || a.Body.String() != b.Body.String() || a.Header().Get("Content-Type") != b.Header().Get("Content-Type") {
			t.Fatalf("%s: got %d %q %q, encode writes %d %q %q", what, a.Code, a.Header().Get("Content-Type"), a.Body.String(),
				b.Code, b.Header().Get("Content-Type"), b.Body.String())
		}
	}
	for i := range 3000 {
		entries := randomEntries(r, r.IntN(12))
		top := topResponse{Board: "match:<1>", Period: "2026-W48", Version: r.Int64(), Entries: entries}
		if i%3 > 0 {
			at := entries
			if len(at) > 0 {
				top.UpdatedAt = &at[0].UpdatedAt
			}
		}
		a, b := httptest.NewRecorder(), httptest.NewRecorder()
		encodeTop(a, top)
		encode(b, http.StatusOK, top)
		same(fmt.Sprintf("top %+v", top), a, b)

		e := randomEntries(r, 1)[0]
		user := userView{UserID: e.UserID, Score: e.Score, Rank: e.Rank, UpdatedAt: e.UpdatedAt, Board: "global", Period: "all_time", Metadata: e.Metadata}
		if i%2 == 0 {
			user.Around = entries
		}
		a, b = httptest.NewRecorder(), httptest.NewRecorder()
		encodeUser(a, user)
		encode(b, http.StatusOK, user)
		same(fmt.Sprintf("user %+v", user), a, b)
	}
}

// BenchmarkEncodeTop: a top-10 answer written by hand and by encode (encoding/json).
func BenchmarkEncodeTop(b *testing.B) {
	now := time.Now().UTC()
	top := topResponse{Board: "global", Period: "all_time", Version: now.UnixMicro(), UpdatedAt: &now}
	for i := range 10 {
		top.Entries = append(top.Entries, entryView{Rank: int64(i + 1), UserID: fmt.Sprintf("user-%06d", i), Score: 999_999 - int64(i), NickName: "Player", UpdatedAt: now})
	}
	w := discardWriter{header: http.Header{}}
	b.Run("hand-written", func(b *testing.B) {
		for b.Loop() {
			encodeTop(w, top)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			encode(w, http.StatusOK, top)
		}
	})
}

type discardWriter struct{ header http.Header }

func (d discardWriter) Header() http.Header         { return d.header }
func (d discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d discardWriter) WriteHeader(int)             {}
