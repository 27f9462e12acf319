package http

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// Random JSON-ish bodies; on valid JSON, the in-place scan must agree with
// encoding/json's tokens; on anything, it must not panic.
func randomJSONValue(r *rand.Rand, depth int) string {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	ws := func() string { return pick("", "", " ", "\n", "\t", "\r\n ") }
	switch k := r.IntN(10); {
	case k < 3 || depth > 6:
		return pick(`1`, `-0`, `12.5e-3`, `0`, `true`, `false`, `null`, `1E+2`, `99999999999999999999`)
	case k < 6:
		return pick(`""`, `"a"`, `"\""`, `"\\"`, `"\\\""`, `"]}"`, `"{["`, `"\u0022"`, `"é"`, "\"\xff\"", `"\/"`, `"\\\\"`, `"a\"}]"`, "\"\u2028\"")
	case k < 8:
		n := r.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = ws() + randomJSONValue(r, depth+1) + ws()
		}
		return "[" + strings.Join(parts, ",") + ws() + "]"
	default:
		n := r.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = ws() + randomJSONKey(r) + ws() + ":" + ws() + randomJSONValue(r, depth+1) + ws()
		}
		return "{" + strings.Join(parts, ",") + ws() + "}"
	}
}

func randomJSONKey(r *rand.Rand) string {
	return []string{`"value"`, `"event_id"`, `"user_id"`, `"metadata"`, `"action_id"`, `"Value"`, `"v\u0061lue"`, `"val\"ue"`, `"value\\"`, "\"value\xff\"", "\"valu\u00e9\"", `"x"`, `""`, `"event\u005fid"`}[r.IntN(14)]
}

func TestCheckMembersAgreesWithTokens(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 42))
	dst := &boardWriteBody{}
	names := jsonNames(reflect.TypeOf(dst))
	ws := func() string { return []string{"", " ", "\n\t"}[r.IntN(3)] }
	bad := 0
	for range 40000 {
		n := r.IntN(5)
		if r.IntN(20) == 0 {
			n = 15 + r.IntN(4) // around checkMembers' 16 kept keys
		}
		parts := make([]string, n)
		for i := range parts {
			k := randomJSONKey(r)
			if n > 5 && r.IntN(2) == 0 {
				k = `"x` + string(rune('a'+i)) + `"`
			}
			if r.IntN(3) > 0 {
				k = []string{`"value"`, `"event_id"`, `"user_id"`, `"metadata"`, `"action_id"`}[r.IntN(5)]
			}
			parts[i] = ws() + k + ws() + ":" + ws() + randomJSONValue(r, 0) + ws()
		}
		body := ws() + "{" + strings.Join(parts, ",") + ws() + "}" + ws()
		if r.IntN(4) == 0 { // mangle: cut or flip a byte
			b := []byte(body)
			j := r.IntN(len(b))
			if r.IntN(2) == 0 {
				b = b[:j]
			} else {
				b[j] = "{}[]\",:\\ 0"[r.IntN(10)]
			}
			body = string(b)
		}
		var got *apiError
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%q: panic %v", body, p)
				}
			}()
			got = checkMembers([]byte(body), dst)
		}()
		if !json.Valid([]byte(body)) {
			continue
		}
		want := checkMembersDecoding([]byte(body), names)
		if !reflect.DeepEqual(got, want) && !(got != nil && want != nil && got.code == want.code && !utf8.ValidString(body)) {
			bad++
			if bad < 10 {
				t.Errorf("%q: checkMembers %+v, tokens %+v", body, got, want)
			}
		}
	}
}
