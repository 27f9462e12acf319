package storage

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// TestDecodeFlatMetadataAgreesWithJSON: the relay's fast decode of an outbox row's
// metadata gives what json.Unmarshal gives, or declines (and json.Unmarshal decodes it);
// it never accepts what json.Unmarshal rejects.
func TestDecodeFlatMetadataAgreesWithJSON(t *testing.T) {
	check := func(t *testing.T, raw string) (fast bool) {
		t.Helper()
		got, ok := decodeFlatMetadata([]byte(raw))
		var want message.Metadata
		err := json.Unmarshal([]byte(raw), &want)
		if !ok {
			return false
		}
		if err != nil {
			t.Fatalf("%q: fast decode accepted what json.Unmarshal rejects (%v): %v", raw, err, got)
		}
		if want == nil {
			want = message.Metadata{}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: fast decode %v, json.Unmarshal %v", raw, got, want)
		}
		return true
	}
	for _, tc := range []struct {
		raw  string
		fast bool
	}{
		{`{}`, true},
		{`{"a":"b"}`, true},
		{`{"_watermill_correlation_id":"c1","event_id":"e-1","partition_key":"user-7"}`, true},
		{`{"a":"b","a":"c"}`, true}, // the last wins, as in json.Unmarshal
		{`{"a":""}`, true},
		{`{"":"x"}`, true},
		{`{"a":"b\"c"}`, false},          // an escape
		{`{"a":"\u003cb\u003e"}`, false}, // json.Marshal's HTML escapes
		{`{"a":"é"}`, false},             // outside ASCII
		{`{ "a":"b"}`, false},            // a space
		{`{"a":1}`, false},               // not a string
		{`{"a":null}`, false},
		{`null`, false},
		{`{"a":"b"`, false},
		{`{"a":"b"}x`, false},
		{`{"a":"b"} `, false}, // json.Unmarshal takes the space, the same map
		{`{"a""b"}`, false},
		{`{"a":"b",}`, false},
		{`{"a":"b"},`, false},
		{`{`, false},
		{`{}}`, false},
		{`"a"`, false},
		{``, false},
		{"{\"a\":\"b\tc\"}", false}, // a control byte
	} {
		if fast := check(t, tc.raw); fast != tc.fast {
			t.Errorf("%q: fast decode %v, want %v", tc.raw, fast, tc.fast)
		}
	}
	// What json.Marshal writes of random metadata: decoded fast unless it needs escapes,
	// and the same either way.
	alphabet := []rune("ab-_:/.{}[],\"\\<>&é\t 0")
	word := func(r *rand.Rand) string {
		n := r.IntN(6)
		out := make([]rune, n)
		for i := range out {
			out[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(out)
	}
	r := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for range 5000 {
		md := message.Metadata{}
		for range r.IntN(5) {
			md[word(r)] = word(r)
		}
		raw, err := json.Marshal(md)
		if err != nil {
			t.Fatal(err)
		}
		if check(t, string(raw)) {
			fast++
		}
		// and a cut or a changed byte of it
		if len(raw) > 1 {
			cut := raw[:r.IntN(len(raw))]
			check(t, string(cut))
			bent := []byte(string(raw))
			bent[r.IntN(len(bent))] = byte(alphabet[r.IntN(12)])
			check(t, string(bent))
		}
	}
	if fast < 500 {
		t.Fatalf("only %d of 5000 marshalled metadata decoded fast", fast)
	}
}

// TestEncodeMetadataIsJSONMarshal: the outbox writes a message's metadata exactly as
// json.Marshal (watermill-sql's adapter) writes it, escapes and key order included, and
// the relay's fast decode reads it back.
func TestEncodeMetadataIsJSONMarshal(t *testing.T) {
	alphabet := []rune("ab-_:/.0Z{}\"\\<>&é\t\u2028\x7f")
	r := rand.New(rand.NewPCG(3, 4))
	plain := 0
	if got, _ := encodeMetadata(nil); got != "null" {
		t.Fatalf("no metadata encoded as %s, json.Marshal writes null", got)
	}
	for range 5000 {
		md := message.Metadata{}
		for range r.IntN(5) {
			k, v := make([]rune, r.IntN(6)), make([]rune, r.IntN(8))
			for i := range k {
				k[i] = alphabet[r.IntN(len(alphabet))]
			}
			for i := range v {
				v[i] = alphabet[r.IntN(len(alphabet))]
			}
			md[string(k)] = string(v)
		}
		got, err := encodeMetadata(md)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(md)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Fatalf("%v: encoded %s, json.Marshal %s", md, got, want)
		}
		back, ok := decodeFlatMetadata([]byte(got))
		if ok {
			plain++
			if !reflect.DeepEqual(back, md) {
				t.Fatalf("%s decoded as %v, want %v", got, back, md)
			}
		}
	}
	if plain < 500 {
		t.Fatalf("only %d of 5000 metadata were plain", plain)
	}
}
