package http

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
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
