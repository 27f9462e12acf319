package http

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/openleaderboard/leaderboard/messages"
)

type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	accepts  *prometheus.CounterVec
	degraded prometheus.Counter
	waits    prometheus.Gauge
}

func newHTTPMetrics(reg prometheus.Registerer) httpMetrics {
	m := httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaderboard_http_requests_total", Help: "HTTP requests by route, method and status."},
			[]string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "leaderboard_http_request_duration_seconds", Help: "HTTP request latency by route and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}},
			[]string{"route", "method"}),
		accepts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaderboard_score_submissions_total", Help: "Writes by board (its definition: match for every match) and outcome (accepted, duplicate, unchanged, conflict, rejected, unavailable)."},
			[]string{"board", "outcome"}),
		degraded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leaderboard_degraded_reads_total", Help: "Reads answered from PostgreSQL because Redis was unavailable."}),
		waits: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leaderboard_write_waits", Help: "Writes with ?wait=true waiting for their score to be applied."}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.accepts, m.degraded, m.waits)
	}
	return m
}

type requestIDKey struct{}

func requestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// requestID takes X-Request-ID when it is a sane id (1–64 printable characters), or makes
// one; it is echoed back and becomes the correlation id stored with every command the
// request publishes. (chi's middleware.RequestID would take any client header, of any
// length, and does not echo it.)
// requestIDHeader is X-Request-ID as net/http keeps header names (canonical): spelled so,
// Get and Set find it without allocating its canonical form on every request.
const requestIDHeader = "X-Request-Id"

func (s *server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(requestIDHeader)
		if !messages.ValidEventID(id) {
			id = uuid.NewString()
		}
		w.Header().Set(requestIDHeader, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}

// decodedPath routes on the decoded path, so that a path parameter encoded by its client
// (steam%3A42, match%3Am1: encodeURIComponent encodes ':') reads as it does unencoded, as
// query parameters do. chi routes on the raw path when the URL has one; no id may hold
// '/', so an encoded one ends in a route that does not exist either way.
func decodedPath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawPath != "" {
			if rctx := chi.RouteContext(r.Context()); rctx != nil {
				rctx.RoutePath = r.URL.Path
			}
		}
		next.ServeHTTP(w, r)
	})
}

// observe records request metrics by route pattern, and logs server errors (failLog).
func (s *server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		method := methodLabel(r.Method)
		s.metrics.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
		s.metrics.latency.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
		if status >= 500 {
			s.failures.log(method, route, status, requestIDFrom(r.Context()), time.Since(start))
		}
	})
}

// methodLabel keeps the method label to a closed set: a caller cannot create series by
// inventing methods.
func methodLabel(m string) string {
	if slices.Contains(knownMethods, m) {
		return m
	}
	return "other"
}

// recoverPanics answers a panicking handler's request in the API's error format and logs
// the panic through slog with the request id. (chi's middleware.Recoverer answers an empty
// 500 and prints to stderr.)
func (s *server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.Logger.Error("panic in handler", "panic", v, "request_id", requestIDFrom(r.Context()))
				writeError(w, r, http.StatusInternalServerError, "internal", "internal error", "")
			}
		}()
		next.ServeHTTP(w, r)
	})
}
