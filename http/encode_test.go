package http

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
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

// slowScore and slowBoardWrite are the request types without their flatRequest methods,
// so decodeStrict takes encoding/json.
type (
	slowScore      scoreRequest
	slowBoardWrite boardWriteRequest
)

// TestDecodeFlatAgreesWithJSON: for write bodies, plain and odd (escapes, case, nulls,
// fractions, duplicates, unknown fields, nesting, trailing data, sizes around the bound),
// decodeStrict's fast path leaves the request and the error exactly as encoding/json does.
func TestDecodeFlatAgreesWithJSON(t *testing.T) {
	bodies := []string{
		`{"score":120,"event_id":"e-1","user_id":"u_1"}`, ` { "score" : -5 , "event_id" : "x" } `, "{\n\t\"score\":0}\r\n",
		`{}`, ` {} `, `{"score":120}x`, `{"score":120}{}`, `{"score":01}`, `{"score":-0}`, `{"score":1.5}`, `{"score":1e3}`,
		`{"score":"120"}`, `{"score":null}`, `{"score":true}`, `{"event_id":5}`, `{"event_id":null}`, `{"event_id":"a\"b"}`,
		`{"event_id":"a\u0041"}`, `{"event_id":"é"}`, "{\"event_id\":\"a\x01\"}", `{"Score":7}`, `{"SCORE":7,"score":8}`,
		`{"score":7,"score":9}`, `{"event_id":"a","event_id":"b"}`, `{"nope":1}`, `{"score":{"a":1}}`, `{"score":[1]}`,
		`{"value":3,"metadata":{"map":"x"}}`, `{"value":3,"metadata":null}`, `{"value":3}`, `{"score":1,}`, `{,}`, `{"score"}`,
		`{"score":}`, `{"score":1`, `{"score":1 "x":2}`, `[]`, `""`, `1`, ``, `   `, `{"score":-}`, `{"score":--1}`,
		`{"score":99999999999999999999999}`, `{"event_id":"` + strings.Repeat("a", 4090) + `"}`,
		`{"event_id":"` + strings.Repeat("a", 5000) + `"}`, `{"score":1}` + strings.Repeat(" ", 5000),
	}
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte(`{}[]:,"\ -0123456789.eE+aeiluvscorent_dmtxnull` + "\t\n\x00\xff")
	templates := []string{`{"score":12,"event_id":"ev","user_id":"u"}`, `{"value":-3,"event_id":"e","metadata":{"k":"v"}}`}
	for range 20000 {
		b := []byte(templates[r.IntN(len(templates))])
		for range 1 + r.IntN(3) {
			switch p := r.IntN(len(b) + 1); r.IntN(3) {
			case 0: // insert
				b = append(b[:p], append([]byte{alphabet[r.IntN(len(alphabet))]}, b[p:]...)...)
			case 1: // delete
				if p < len(b) {
					b = append(b[:p], b[p+1:]...)
				}
			default: // replace
				if p < len(b) {
					b[p] = alphabet[r.IntN(len(alphabet))]
				}
			}
		}
		bodies = append(bodies, string(b))
	}
	decode := func(body string, dst any) *apiError {
		req := httptest.NewRequest(http.MethodPost, "/v1/scores", strings.NewReader(body))
		e := decodeStrict(httptest.NewRecorder(), req, dst)
		if e != nil { // encoding/json's messages name the Go type
			e.message = strings.NewReplacer("slowScore", "scoreRequest", "slowBoardWrite", "boardWriteRequest").Replace(e.message)
		}
		return e
	}
	fast := 0
	for _, body := range bodies {
		var a scoreRequest
		var b slowScore
		ea, eb := decode(body, &a), decode(body, &b)
		if !reflect.DeepEqual(a, scoreRequest(b)) || !reflect.DeepEqual(ea, eb) {
			t.Fatalf("score body %q: fast path %+v %v, encoding/json %+v %v", body, a, ea, b, eb)
		}
		var c boardWriteRequest
		var d slowBoardWrite
		ec, ed := decode(body, &c), decode(body, &d)
		if !reflect.DeepEqual(c, boardWriteRequest(d)) || !reflect.DeepEqual(ec, ed) {
			t.Fatalf("board write body %q: fast path %+v %v, encoding/json %+v %v", body, c, ec, d, ed)
		}
		if decodeFlat([]byte(body), new(scoreRequest)) {
			fast++
		}
	}
	if fast < 100 {
		t.Errorf("only %d of %d bodies took the fast path: the comparison says little", fast, len(bodies))
	}
}
