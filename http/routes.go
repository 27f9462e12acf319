package http

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/openleaderboard/leaderboard/configs"
)

// Every route is registered here. Authentication runs per endpoint (chi groups), after
// routing, so a wrong method is answered 405 before any token is looked at.
func (s *server) routes() http.Handler {
	r := chi.NewRouter()
	// A HEAD is routed as its GET (RFC 9110 9.3.2), after decodedPath chose the path.
	r.Use(decodedPath, middleware.GetHead, s.requestID, securityHeaders, s.observe, s.recoverPanics)
	if s.Config.UsesDevSecret() {
		r.Use(loopbackHostOnly)
	}

	s.opsRoutes(r)

	r.Get("/", s.handlePage())
	r.Get("/static/live.js", s.handleStatic("text/javascript; charset=utf-8", pageJS))
	r.Get("/static/live.css", s.handleStatic("text/css; charset=utf-8", pageCSS))

	// The stream authenticates itself: browsers pass a realtime token in the URL.
	r.With(validQuery).Get("/v1/realtime/leaderboard", s.handleRealtimeLeaderboard())
	r.Group(func(r chi.Router) {
		r.Use(s.authenticate, validQuery)
		r.Get("/v1/realtime/token", s.handleRealtimeToken())
		// The global board (seeds 000, 002).
		r.Post("/v1/scores", s.handleSubmitScore())
		r.Get("/v1/leaderboard/top", s.handleTop(globalBoard))
		r.Get("/v1/leaderboard/users/{user_id}", s.handleUser(globalBoard))
		r.Get("/v1/leaderboard/me", s.handleMe())
		// Any board.
		r.Get("/v1/boards", s.handleListBoards())
		r.Post("/v1/boards/{board_id}/scores", s.handleBoardWrite())
		r.Get("/v1/boards/{board_id}/top", s.handleTop(""))
		r.Get("/v1/boards/{board_id}/entries", s.handleEntries())
		r.Get("/v1/boards/{board_id}/users", s.handleFriends())
		r.Get("/v1/boards/{board_id}/users/{user_id}", s.handleUser(""))
		// Increments (seed 003).
		r.Post("/v1/scores/increment", s.handleIncrement())
		// Matches, days and seasons (seed 004).
		r.Post("/v1/matches/{match_id}/users/{user_id}/point", s.handleMatchPoint())
		r.Get("/v1/match-leaderboard/{match_id}/score", s.handleMatchScore())
		r.Get("/v1/daily-leaderboard", s.handleDailyPage())
		r.Get("/v1/daily-leaderboard/users/{user_id}", s.handleSeed004User("daily", "date"))
		r.Get("/v1/season-leaderboard/users/{user_id}", s.handleSeed004User("season", "season"))
	})
	r.Group(func(r chi.Router) {
		r.Use(s.authenticate, s.requireRole("admin"), validQuery)
		r.Get("/admin/dlq", s.handleListDeadLetters())
		r.Post("/admin/dlq/requeue", s.handleRequeueMatching())
		// Ids are digits, so /admin/dlq/requeue is never taken for an id.
		r.Get("/admin/dlq/{id:[0-9]+}", s.handleGetDeadLetter())
		r.Post("/admin/dlq/{id:[0-9]+}/requeue", s.handleRequeueDeadLetter())
		r.Delete("/admin/dlq/{id:[0-9]+}", s.handleDeleteDeadLetter())
		r.Post("/admin/boards/{board_id}/rebuild", s.handleRebuild())
		r.Post("/admin/boards/{board_id}/seasons", s.handleStartSeason())
		r.Get("/admin/consistency", s.handleConsistency())
		// Moderation.
		r.Get("/admin/users/{user_id}/ban", s.handleGetBan())
		r.Post("/admin/users/{user_id}/ban", s.handleBan(true))
		r.Delete("/admin/users/{user_id}/ban", s.handleBan(false))
		r.Post("/admin/boards/{board_id}/entries/{user_id}/adjust", s.handleAdjust())
		r.Delete("/admin/boards/{board_id}/entries/{user_id}", s.handleRemove())
		r.Get("/admin/anomalies", s.handleAnomalies())
		r.Get("/admin/audit", s.handleAudit())
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusNotFound, "not_found", "no such endpoint", "")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		methodNotAllowed(allowedMethods(r, req.URL.Path)...)(w, req)
	})
	return r
}

// opsRoutes are the endpoints every process serves, whatever its roles.
func (s *server) opsRoutes(r chi.Router) {
	r.Get("/healthz", s.handleHealthz())
	r.Get("/readyz", s.handleReadyz())
	// A collector that fails (the Kafka consumer lag while the broker or the group's
	// coordinator is unavailable) leaves its series out of that scrape and is logged; it
	// does not turn the whole scrape into a 500.
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, ErrorLog: metricsErrorLog{s.Logger}}))
}

// metricsErrorLog logs a scrape's gathering errors as warnings.
type metricsErrorLog struct{ logger *slog.Logger }

func (l metricsErrorLog) Println(v ...any) { l.logger.Warn("metrics scrape", "err", fmt.Sprint(v...)) }

// wantsWait reports whether the request asks to wait (?wait=true, 1, TRUE...); validQuery
// refused any other value than a boolean or an empty one (no wait).
func wantsWait(r *http.Request) bool {
	if r.URL.RawQuery == "" {
		return false
	}
	v, _ := strconv.ParseBool(r.URL.Query().Get("wait"))
	return v
}

// validQuery refuses a query string url.Values would parse only in part: a pair that is
// not valid percent-encoding (or holds a ';') is dropped silently, and the handler would
// answer with its default (?limit=%zz answered the default limit, ?period=<date>% the
// current period's board); and a write's wait that is not a boolean or empty (?wait=yes
// would otherwise answer 202 at once, as if the client had not asked to wait). Reads take
// no wait: they leave it alone, as any parameter they do not know.
func validQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" {
			q, err := url.ParseQuery(r.URL.RawQuery)
			if err != nil {
				writeError(w, r, http.StatusBadRequest, "invalid_query", "malformed query string: "+err.Error(), "")
				return
			}
			if v, ok := q["wait"]; ok && v[0] != "" && r.Method != http.MethodGet && r.Method != http.MethodHead {
				if _, err := strconv.ParseBool(v[0]); err != nil {
					writeError(w, r, http.StatusBadRequest, "invalid_query", "wait must be true or false (or 1 or 0), got "+strconv.Quote(v[0]), "")
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// methodNotAllowed answers 405 with the Allow header.
func methodNotAllowed(allow ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, r, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed on this endpoint; allowed: "+strings.Join(allow, ", "), "")
	}
}

// allowedMethods lists the methods routes has for path (chi keeps its own list private).
func allowedMethods(routes chi.Routes, path string) []string {
	var allow []string
	for _, m := range knownMethods {
		if routes.Match(chi.NewRouteContext(), m, path) || m == http.MethodHead && routes.Match(chi.NewRouteContext(), http.MethodGet, path) {
			allow = append(allow, m)
		}
	}
	return allow
}

// knownMethods is the closed set of methods the service names, in Allow headers and
// metric labels; any other method is "other".
var knownMethods = []string{http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPatch, http.MethodPost, http.MethodPut}

// loopbackHostOnly refuses requests that do not name a loopback host (localhost,
// 127.0.0.0/8, [::1]) in Host, and requests a proxy said it forwarded. It guards a service
// running with the published development secret (which listens on a loopback address
// only): a web page whose host name was made to resolve to 127.0.0.1 (DNS rebinding)
// reaches it from the developer's browser as its own origin, and a reverse proxy on the
// same machine that forwards the client's address from anywhere; either could otherwise
// mint tokens with the known secret and call the admin API. A proxy or tunnel that adds
// no forwarding header (nginx's bare proxy_pass names Host 127.0.0.1:8080 and nothing
// more; socat; ssh -R) looks like a local client and is not refused: the README says so.
func loopbackHostOnly(next http.Handler) http.Handler {
	return LoopbackOnly("this service runs with the development secret", "set LEADERBOARD_JWT_SECRET", next)
}

// LoopbackOnly refuses, 403 in the API's error format, requests that do not name a
// loopback host in Host and requests that carry a proxy's forwarding header; what says
// why the listener answers only those, hint what to do instead.
func LoopbackOnly(what, hint string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !configs.IsLoopback(withPort(r.Host)) {
			writeError(w, r, http.StatusForbidden, "forbidden", what+" and answers only requests to localhost, 127.0.0.1 or [::1]", "")
			return
		}
		for _, h := range [...]string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip",
			"Via", "Cf-Connecting-Ip", "True-Client-Ip", "X-Original-Forwarded-For"} {
			if _, ok := r.Header[h]; ok {
				writeError(w, r, http.StatusForbidden, "forbidden", what+" and answers no request a proxy forwarded ("+h+"): "+hint, "")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// withPort gives a Host header without a port one, as net.SplitHostPort wants.
func withPort(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") { // a bare IPv6 address
		host = "[" + host + "]"
	}
	return host + ":80"
}

// securityHeaders sets the headers every response carries.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}
