package handlers

import "github.com/prometheus/client_golang/prometheus"

// ProjectorMetrics are the projector's series.
type ProjectorMetrics struct {
	batchSize prometheus.Histogram
	stepTime  *prometheus.HistogramVec
	events    *prometheus.CounterVec
	lag       prometheus.Histogram
}

// NewProjectorMetrics makes the projector's series and registers them with reg (when not
// nil).
func NewProjectorMetrics(reg prometheus.Registerer) *ProjectorMetrics {
	m := &ProjectorMetrics{
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leaderboard_projector_batch_size", Help: "Events per projector batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		stepTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "leaderboard_projector_step_seconds", Help: "Time of each projector batch step (postgres, redis).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)}, []string{"step"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaderboard_projector_events_total", Help: "Events the projector handled, by board (its definition) and result (applied, redelivered, failed)."},
			[]string{"board", "result"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leaderboard_projection_lag_seconds", Help: "Time from accept to applied in Redis.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}),
	}
	if reg != nil {
		reg.MustRegister(m.batchSize, m.stepTime, m.events, m.lag)
	}
	return m
}
