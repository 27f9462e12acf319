package http

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"net/http"
	"time"
)

var (
	//go:embed static/index.html
	pageHTML []byte
	//go:embed static/live.js
	pageJS []byte
	//go:embed static/live.css
	pageCSS []byte
)

// devTokenMarker is where the page receives a viewer token when the service runs with
// the documented development secret (accepted only on a loopback address, where anyone
// can mint tokens anyway), so a newcomer sees the live board at http://127.0.0.1:8080/
// without a token of their own. It is a realtime token: it opens streams and nothing else.
var devTokenMarker = []byte(`<meta name="lb-dev-token" content="">`)

// boardsMarker is where the page receives the board list (a JSON data block, not a
// script: the policy below runs no inline script).
var boardsMarker = []byte(`<script id="lb-boards" type="application/json">[]</script>`)

// pagePolicy is the live page's Content-Security-Policy: its own script and style only,
// no inline script, never framed.
const pagePolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// handlePage serves the live top-10 page (static, embedded in the binary).
func (s *server) handlePage() http.HandlerFunc {
	type board struct {
		ID       string `json:"id"`
		Operator string `json:"operator"`
		Order    string `json:"order"`
		Period   string `json:"period"`
	}
	list := make([]board, len(s.Config.Boards))
	for i, b := range s.Config.Boards {
		list[i] = board{ID: b.ID, Operator: b.Operator, Order: b.Order, Period: b.Period}
	}
	raw, _ := json.Marshal(list) // escapes <, > and &: safe inside the data block
	withBoards := bytes.Replace(pageHTML, boardsMarker, []byte(`<script id="lb-boards" type="application/json">`+string(raw)+`</script>`), 1)
	return func(w http.ResponseWriter, r *http.Request) {
		page := withBoards
		if s.Config.UsesDevSecret() {
			if tok, _, err := s.tokens.signRealtime("viewer", "", s.Realtime.TokenTTL, time.Time{}); err == nil {
				page = bytes.Replace(withBoards, devTokenMarker, []byte(`<meta name="lb-dev-token" content="`+tok+`">`), 1)
			}
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", pagePolicy)
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("X-Frame-Options", "DENY")
		_, _ = w.Write(page)
	}
}

// handleStatic serves one of the page's embedded files.
func (s *server) handleStatic(contentType string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(body)
	}
}
