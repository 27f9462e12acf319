package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/openleaderboard/leaderboard/messages"
)

// decodeReference is decodeStrict without its fast path: the members' check of a body read
// whole, then encoding/json alone.
func decodeReference(w http.ResponseWriter, r *http.Request, dst any) *apiError {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		return decodeJSON(io.MultiReader(bytes.NewReader(data), errReader{err}), dst)
	}
	if e := checkMembers(data, dst); e != nil {
		return e
	}
	return decodeJSON(bytes.NewReader(data), dst)
}

// TestDecodeStrictRefusesAmbiguousMembers: a member named twice, or named only without
// regard to case (encoding/json reads "Value" and "vaſue" as value), is refused on both
// paths; a name written with escapes is the name it spells, and metadata's own members
// are the client's.
func TestDecodeStrictRefusesAmbiguousMembers(t *testing.T) {
	for body, want := range map[string]string{
		`{"value":1,"value":2}`:                      "invalid_json",
		`{"value":1, "event_id":"a","event_id":"b"}`: "invalid_json",
		`{"value":1,"metadata":{},"metadata":{}}`:    "invalid_json",
		`{"Value":1}`:           "unknown_field",
		`{"value":1,"vaſue":2}`: "unknown_field",
		`{"value":1,"metadata":{"k":1},"EVENT_ID":"x"}`: "unknown_field",
		`{"v\u0061lue":1}`:                           "",
		`{"value":1,"metadata":{"a":1,"a":2,"A":3}}`: "",
	} {
		var got boardWriteBody
		e := decodeStrict(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), &got)
		switch {
		case want == "" && e != nil:
			t.Errorf("%s: %v, want it read", body, e)
		case want != "" && (e == nil || e.code != want):
			t.Errorf("%s: %+v, want 400 %s", body, e, want)
		}
	}
}

// randomBody is a score body as clients write it, or one of the ways they get it wrong.
func randomBody(r *rand.Rand, valueKey string) string {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	members := []string{}
	if r.IntN(8) > 0 {
		members = append(members, `"`+valueKey+`":`+pick(`1500`, `-3`, `0`, `12.5`, `1e3`, `"12"`, `null`, `true`, `[1]`, `{}`, `99999999999999999999`, `-0`, `01`))
	}
	if r.IntN(5) > 0 {
		members = append(members, `"event_id":`+pick(`"m-17"`, `"a b"`, `"\u00e9"`, `"é"`, `"a\"b"`, `"\n"`, `null`, `17`, `""`, `"x\\y"`))
	}
	if r.IntN(5) > 0 {
		members = append(members, `"user_id":`+pick(`"alice"`, `"Bob-2"`, `null`, `7`, `"<b>"`, "\"\xff\""))
	}
	if r.IntN(10) == 0 {
		members = append(members, pick(`"metadata":{"map":"dust2"}`, `"metadata":null`, `"Score":5`, `"USER_ID":"u"`, `"extra":1`, `"user_id":"again"`, `"event_id":"again"`))
	}
	r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	sep := pick(",", " , ", ",\n\t", ",,")
	body := pick("{", " {", "\n{\r\n") + strings.Join(members, sep) + pick("}", " }\n", "}x", "} {}", "", "}]")
	switch r.IntN(20) {
	case 0:
		body = ""
	case 1:
		body = `{"` + valueKey + `":"` + strings.Repeat("9", maxBodyBytes) + `"}` // too large
	case 2:
		body = body[:r.IntN(len(body)+1)] // cut short
	}
	return body
}

// TestDecodeStrictIsTheDecoder: for score bodies of both write endpoints, well-formed or
// not, decodeStrict (its fast path or encoding/json) gives what encoding/json alone gave:
// the same values and the same error, which later requests do not change (their bodies
// reuse the buffer); and the fast path reads the plain bodies.
func TestDecodeStrictIsTheDecoder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	fast := 0
	var prevGot, prevWant any
	for i := range 20000 {
		var got, want, flat any
		key := "score"
		if i%2 == 0 {
			got, want, flat = &scoreBody{}, &scoreBody{}, &scoreBody{}
		} else {
			key = "value"
			got, want, flat = &boardWriteBody{}, &boardWriteBody{}, &boardWriteBody{}
		}
		body := randomBody(r, key)
		if json.Valid([]byte(body)) { // the in-place check reads members as encoding/json's tokens do
			fastCheck, tokens := checkMembers([]byte(body), got), checkMembersDecoding([]byte(body), jsonNames(reflect.TypeOf(got)))
			if !reflect.DeepEqual(fastCheck, tokens) {
				t.Fatalf("%q: checkMembers %+v, by tokens %+v", body, fastCheck, tokens)
			}
		}
		gotErr := decodeStrict(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), got)
		wantErr := decodeReference(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), want)
		if !reflect.DeepEqual(gotErr, wantErr) {
			t.Fatalf("%q: error %+v, want %+v", body, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", body, got, want)
		}
		// The body's buffer goes to the next request: what this one decoded must not change.
		if prevWant != nil && !reflect.DeepEqual(prevGot, prevWant) {
			t.Fatalf("after %q the body before it decodes to %+v, want %+v", body, prevGot, prevWant)
		}
		prevGot, prevWant = got, want
		if _, ok := scanBody(body, flat.(flatDecoder)); ok {
			fast++
		}
	}
	if fast < 1000 {
		t.Errorf("the fast path read %d of 20000 bodies", fast)
	}
	var plain scoreBody
	if _, ok := scanBody(`{"user_id":"alice","score":1500,"event_id":"m-17"}`, &plain); !ok || *plain.UserID != "alice" || string(plain.Score) != "1500" || *plain.EventID != "m-17" {
		t.Errorf("the fast path does not read a plain body: %+v", plain)
	}
}

// TestDecodeStrictReadErrors: a body that fails to read gives the error it gave before.
func TestDecodeStrictReadErrors(t *testing.T) {
	for _, body := range []string{`{"score":1`, `{"score":1}`, ``, `{"score":`} {
		failing := func() io.Reader {
			return io.MultiReader(strings.NewReader(body), errReader{errors.New("connection reset")})
		}
		var got, want scoreBody
		gotErr := decodeStrict(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", failing()), &got)
		wantErr := decodeReference(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", failing()), &want)
		if !reflect.DeepEqual(gotErr, wantErr) || !reflect.DeepEqual(got, want) {
			t.Errorf("%q then a read error: %+v %+v, want %+v %+v", body, gotErr, got, wantErr, want)
		}
	}
}

// scanBody runs the fast path alone.
func scanBody(body string, dst flatDecoder) (int, bool) {
	var members [8]messages.FlatMember
	n, ok := messages.ScanFlat([]byte(body), members[:])
	return n, ok && dst.decodeFlat(members[:n])
}

// TestCheckMembersAllocatesNothing: the members' check runs on every write body the flat
// path does not read (every increment, match point, and write with metadata or an
// action_id): it reads the keys in place. Its first version walked encoding/json's tokens
// and cost 70 allocations per increment, six times decodeJSON's own (found by a review).
// A key with escapes still goes through the tokens, and is read as the name it spells.
func TestCheckMembersAllocatesNothing(t *testing.T) {
	type incr struct { // handleIncrement's request
		UserID    *string         `json:"user_id"`
		Delta     json.RawMessage `json:"delta"`
		EventID   *string         `json:"event_id"`
		Timestamp *string         `json:"timestamp"`
		Signature *string         `json:"signature"`
		ActionID  *string         `json:"action_id"`
	}
	inc := []byte(`{"user_id":"alice","delta":5,"event_id":"e-1","timestamp":"2026-05-04T12:00:00Z","signature":"abcdef0123456789"}`)
	meta := []byte(` { "value" : -5 , "event_id":"e-1", "metadata":{"map":"du\"st]2","kills":[12,{"a":"}"}]} } `)
	var d incr
	var b boardWriteBody
	for name, run := range map[string]func(){
		"increment": func() {
			if e := checkMembers(inc, &d); e != nil {
				t.Fatal(e)
			}
		},
		"metadata": func() {
			if e := checkMembers(meta, &b); e != nil {
				t.Fatal(e)
			}
		},
	} {
		if n := testing.AllocsPerRun(200, run); n > 0 {
			t.Errorf("checkMembers of a %s body: %.0f allocations, want 0", name, n)
		}
	}
	for body, want := range map[string]string{
		`{"value":1,"metadata":{"value":2},"value":3}`: "invalid_json", // a nested key is not a member
		`{"metadata":{"value":2},"value":3}`:           "",
		`{"v\u0061lue":1,"value":2}`:                   "invalid_json",
		`{"value":1,"Value":2}`:                        "unknown_field",
		`{"value":"a,\"}b","metadata":[]}`:             "",
	} {
		var got boardWriteBody
		e := checkMembers([]byte(body), &got)
		switch {
		case want == "" && e != nil:
			t.Errorf("%s: %v, want no refusal", body, e)
		case want != "" && (e == nil || e.code != want):
			t.Errorf("%s: %+v, want %s", body, e, want)
		}
	}
}
