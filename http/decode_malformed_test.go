package http

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// TestMalformedBodyIsDecodeJSONsToReport: anything but a member named twice or not
// exactly a field's name is decodeJSON's to report: the in-place scan does not check the
// values it skips, so on a body whose syntax breaks before a later key it went on and
// reported that key (unknown_field, or "names member twice") where decodeJSON reports the
// syntax error (invalid_json); it refuses only valid JSON now (found by a review).
func TestMalformedBodyIsDecodeJSONsToReport(t *testing.T) {
	for _, body := range []string{
		`{"score":tru,"extra":1}`,            // unknown_field, want invalid_json
		`{"score":[1 2],"Score":1}`,          // unknown_field, want invalid_json
		`{"score":{"a" 1},"score":1}`,        // "names member twice", want the syntax error
		`{"event_id":"a` + "\n" + `","x":1}`, // control character in a string
	} {
		var got scoreBody
		gotErr := decodeStrict(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), &got)
		var want scoreBody
		wantErr := checkMembersDecoding([]byte(body), jsonNames(reflect.TypeOf(&want)))
		if wantErr == nil {
			wantErr = decodeJSON(bytes.NewReader([]byte(body)), &want)
		}
		if !reflect.DeepEqual(gotErr, wantErr) {
			t.Errorf("%s: %s %q, want %s %q", body, gotErr.code, gotErr.message, wantErr.code, wantErr.message)
		}
	}
}
