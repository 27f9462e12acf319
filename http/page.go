package http

import (
	"bytes"
	_ "embed"
	"net/http"
)

//go:embed static/index.html
var pageHTML []byte

// devTokenMarker is where the page receives a viewer token when the service runs with
// the documented development secret (anyone can mint tokens then anyway), so a newcomer
// sees the live board at http://127.0.0.1:8080/ without a token of their own.
var devTokenMarker = []byte(`<meta name="lb-dev-token" content="">`)

// handlePage serves the live top-10 page (static, embedded in the binary).
func (s *server) handlePage() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		page := pageHTML
		if s.Config.UsesDevSecret() {
			if tok, _, err := s.signRealtimeToken("viewer", ""); err == nil {
				page = bytes.Replace(pageHTML, devTokenMarker, []byte(`<meta name="lb-dev-token" content="`+tok+`">`), 1)
			}
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'")
		_, _ = w.Write(page)
	}
}
