package http

import (
	"bytes"
	_ "embed"
	"net/http"
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

// pagePolicy is the live page's Content-Security-Policy: its own script and style only,
// no inline script, never framed.
const pagePolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// handlePage serves the live top-10 page (static, embedded in the binary).
func (s *server) handlePage() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		page := pageHTML
		if s.Config.UsesDevSecret() {
			if tok, _, err := s.tokens.signRealtime("viewer", "", s.Realtime.TokenTTL); err == nil {
				page = bytes.Replace(pageHTML, devTokenMarker, []byte(`<meta name="lb-dev-token" content="`+tok+`">`), 1)
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
