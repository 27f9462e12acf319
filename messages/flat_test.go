package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// reference decodes as the projector did before DecodeScoreSubmitted.
func reference(payload []byte) (ScoreSubmitted, error) {
	var cmd ScoreSubmitted
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	err := dec.Decode(&cmd)
	return cmd, err
}

func randomText(r *rand.Rand) string {
	const plain = "abcXYZ019-_:. "
	const odd = "\"\\<>&\u00e9\u2028\x01\t/"
	b := []rune{}
	for range r.IntN(12) {
		if r.IntN(60) == 0 {
			b = append(b, []rune(odd)[r.IntN(len([]rune(odd)))])
		} else {
			b = append(b, rune(plain[r.IntN(len(plain))]))
		}
	}
	return string(b)
}

func randomCommand(r *rand.Rand) ScoreSubmitted {
	values := []int64{0, 1, -1, 42, math.MaxInt64, math.MinInt64, r.Int64(), -r.Int64()}
	zones := []*time.Location{time.UTC, time.FixedZone("", 3600), time.FixedZone("X", -19800)}
	cmd := ScoreSubmitted{
		EventID: randomText(r), Board: randomText(r), Period: randomText(r), UserID: randomText(r),
		Value:      values[r.IntN(len(values))],
		OccurredAt: time.Unix(r.Int64N(1<<34), r.Int64N(2)*r.Int64N(1e9)).In(zones[r.IntN(len(zones))]),
	}
	if r.IntN(3) == 0 {
		cmd.Op = []string{OpAdjust, OpRemove, OpSync, randomText(r)}[r.IntN(4)]
	}
	if r.IntN(3) == 0 {
		cmd.NickName = randomText(r)
	}
	if r.IntN(6) == 0 {
		cmd.Also = []BoardValue{{Board: randomText(r), Period: randomText(r), Value: r.Int64()}}
	}
	if r.IntN(6) == 0 {
		cmd.Metadata = json.RawMessage(`{"k":` + []string{`1`, `"v"`, `[1,{}]`, `null`}[r.IntN(4)] + `}`)
	}
	return cmd
}

// mutate changes payload the ways a broken or foreign producer might.
func mutate(r *rand.Rand, payload []byte) []byte {
	p := append([]byte(nil), payload...)
	const tokens = " \t\n\r{}[],:\"\\-+.eE0123456789aznulltruefalse\x00\xff"
	switch r.IntN(8) {
	case 0: // replace a byte
		if len(p) > 0 {
			p[r.IntN(len(p))] = tokens[r.IntN(len(tokens))]
		}
	case 1: // insert a byte
		i := r.IntN(len(p) + 1)
		p = append(p[:i], append([]byte{tokens[r.IntN(len(tokens))]}, p[i:]...)...)
	case 2: // delete a byte
		if len(p) > 0 {
			i := r.IntN(len(p))
			p = append(p[:i], p[i+1:]...)
		}
	case 3: // trailing data
		p = append(p, []string{" ", "\n", "x", "{}", " 1", "]"}[r.IntN(6)]...)
	case 4: // a key in other case (encoding/json matches keys without case)
		p = bytes.Replace(p, []byte(`"value"`), []byte(`"VALUE"`), 1)
	case 5: // a key twice (the last wins in encoding/json)
		p = bytes.Replace(p, []byte(`{`), []byte(`{"user_id":"first",`), 1)
	case 6: // another value
		p = bytes.Replace(p, []byte(`"value":`), []byte(`"value":`+[]string{`1.0`, `1e3`, `-0`, `00`, `"1"`, `null`, `99999999999999999999`, `-`, `true`}[r.IntN(9)]+`,"x":`), 1)
	case 7: // whitespace around the tokens
		p = bytes.ReplaceAll(p, []byte(`,`), []byte(" ,\n\t"))
		p = bytes.ReplaceAll(p, []byte(`:`), []byte("\r: "))
	}
	return p
}

// TestDecodeScoreSubmittedIsTheDecoder: for commands as the API writes them and for every
// kind of broken or foreign payload, DecodeScoreSubmitted gives what encoding/json's strict
// Decoder gives (values, or an error), and its fast path reads the plain commands.
func TestDecodeScoreSubmittedIsTheDecoder(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 34))
	fast := 0
	for i := range 20000 {
		payload, err := json.Marshal(randomCommand(r))
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			payload = mutate(r, payload)
		}
		want, wantErr := reference(payload)
		got, gotErr := DecodeScoreSubmitted(payload)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("%q: error %v, want %v", payload, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %#v\nwant %#v", payload, got, want)
		}
		var cmd ScoreSubmitted
		if decodeFlatScoreSubmitted(payload, &cmd) {
			fast++
		}
	}
	if fast < 5000 {
		t.Errorf("the fast path read %d of 20000 payloads; want most of the plain ones", fast)
	}
	plain, _ := json.Marshal(ScoreSubmitted{EventID: "e-1", Board: "global", Period: "all_time", UserID: "u-1", Value: 10, OccurredAt: time.Now()})
	var cmd ScoreSubmitted
	if !decodeFlatScoreSubmitted(plain, &cmd) {
		t.Errorf("the fast path does not read %s", plain)
	}
}

// TestScanFlat: what ScanFlat reads and what it leaves to encoding/json.
func TestScanFlat(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int // members, -1: not read
	}{
		{`{}`, 0}, {`{} x`, -1}, {`{}}`, -1}, {" {\n} \t", 0}, {`{"a":1,"b":"x"}`, 2}, {`{"a":-12}`, 1}, {`{"a":0}`, 1},
		{`{"a":01}`, -1}, {`{"a":1.5}`, -1}, {`{"a":1e2}`, -1}, {`{"a":-}`, -1}, {`{"a":"\n"}`, -1},
		{`{"a":"\u0041"}`, -1}, {"{\"a\":\"\u00e9\"}", -1}, {`{"a":null}`, -1}, {`{"a":true}`, -1},
		{`{"a":[1]}`, -1}, {`{"a":{}}`, -1}, {`{"a":1,"a":2}`, -1}, {`{"a":1,}`, -1}, {`{"a":1} x`, -1},
		{`{"a":1}{}`, -1}, {`{"a" 1}`, -1}, {`{"a":1`, -1}, {`{a:1}`, -1}, {``, -1}, {`[]`, -1},
		{`{"a":"x\"}`, -1}, {`{"1":1,"2":2,"3":3}`, -1}, // more members than out holds (2)
	} {
		var out [2]FlatMember
		n, ok := ScanFlat([]byte(c.in), out[:])
		if !ok {
			n = -1
		}
		if n != c.want {
			t.Errorf("ScanFlat(%q) = %d, want %d", c.in, n, c.want)
		}
	}
}

// TestEncodeScoreSubmittedIsMarshal: EncodeScoreSubmitted writes what encoding/json writes
// without its HTML escapes, byte for byte, for plain commands and for every other kind
// (escapes, HTML characters, non-ASCII, also, metadata, times json.Marshal refuses).
func TestEncodeScoreSubmittedIsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(56, 78))
	for i := range 20000 {
		cmd := randomCommand(r)
		if i%97 == 0 {
			cmd.OccurredAt = time.Date(10000+r.IntN(5), 1, 1, 0, 0, 0, 0, time.UTC) // outside what RFC 3339 writes
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		wantErr := enc.Encode(cmd)
		want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if wantErr != nil {
			want = nil
		}
		got, gotErr := EncodeScoreSubmitted(cmd)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !bytes.Equal(got, want) {
			t.Fatalf("%#v:\n got %s %v\nwant %s %v", cmd, got, gotErr, want, wantErr)
		}
	}
}

// TestMetadataTheAPITakesIsValidOnTheWay: metadata the API takes (ValidMetadata, up to
// MaxMetadataBytes as the client sent it) reaches the projector as it was sent and passes
// its Validate, whatever characters it holds: json.Marshal wrote '<', '>' and '&' as six
// bytes each and U+2028 and U+2029 as six instead of three, so such metadata near the bound
// was accepted (202) and then dead-lettered. A command an earlier build encoded so passes
// Validate too (a requeued dead letter, a command in flight across an upgrade).
func TestMetadataTheAPITakesIsValidOnTheWay(t *testing.T) {
	for _, fill := range []string{"&", "<", ">", "\u2028", "\u2029", "Rock & Roll <b>", "x"} {
		head := `{"track":"`
		md := head + strings.Repeat(fill, (MaxMetadataBytes-len(head)-2)/len(fill))
		md += strings.Repeat("y", MaxMetadataBytes-len(md)-2) + `"}`
		if len(md) != MaxMetadataBytes || !ValidMetadata([]byte(md)) {
			t.Fatalf("%d bytes of %q: the API would refuse them", len(md), fill)
		}
		cmd := ScoreSubmitted{EventID: "e-1", Board: "global", Period: "all_time", UserID: "u-1", Value: 10,
			Metadata: json.RawMessage(md), OccurredAt: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
		payload, err := EncodeScoreSubmitted(cmd)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeScoreSubmitted(payload)
		if err != nil {
			t.Fatalf("%q: %v", fill, err)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("metadata of %q, %d bytes as sent, %d on the way: %v", fill, len(md), len(got.Metadata), err)
		}
		if string(got.Metadata) != md {
			t.Errorf("metadata of %q changed on the way: %d bytes, want %d", fill, len(got.Metadata), len(md))
		}
		escaped, err := json.Marshal(cmd) // as builds before this one wrote it
		if err != nil {
			t.Fatal(err)
		}
		if old, err := DecodeScoreSubmitted(escaped); err != nil || old.Validate() != nil {
			t.Errorf("metadata of %q as json.Marshal writes it (%d bytes): %v %v", fill, len(old.Metadata), err, old.Validate())
		}
	}
	over := `{"track":"` + strings.Repeat("&", MaxMetadataBytes-11) + `"}`
	cmd := ScoreSubmitted{EventID: "e-1", Board: "global", Period: "all_time", UserID: "u-1", Value: 10,
		Metadata: json.RawMessage(over), OccurredAt: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	escaped, _ := json.Marshal(cmd)
	if old, err := DecodeScoreSubmitted(escaped); err != nil || old.Validate() == nil {
		t.Errorf("metadata of %d bytes as sent, escaped: valid (%v), want refused", len(over), err)
	}
}
