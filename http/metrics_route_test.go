package http

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/openleaderboard/leaderboard/configs"
)

// failingCollector fails every collection, as the Kafka consumer lag does while the
// group's coordinator is unavailable.
type failingCollector struct{ desc *prometheus.Desc }

func (c failingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c failingCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(c.desc, errors.New("coordinator not available"))
}

// TestMetricsSurviveAFailingCollector: a collector that fails leaves its own series out of
// the scrape; the rest is served with 200.
func TestMetricsSurviveAFailingCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(failingCollector{prometheus.NewDesc("test_lag", "lag", nil, nil)})
	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_up", Help: "up"})
	up.Set(1)
	reg.MustRegister(up)
	cfg, _ := configs.Load(func(string) string { return "" })
	h := NewOpsServer(Deps{Config: cfg, Logger: slog.New(slog.DiscardHandler), Registry: reg})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "test_up 1") {
		t.Fatalf("/metrics with a failing collector: %d %s", rec.Code, rec.Body.String())
	}
}
