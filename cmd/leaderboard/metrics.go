package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/openleaderboard/leaderboard/router"
)

// registerStoreMetrics exports the PostgreSQL and Redis connection pools at scrape time,
// and the number of dead letters waiting as last counted (router.ScrapeCount).
func registerStoreMetrics(reg prometheus.Registerer, pool *pgxpool.Pool, rdb redis.UniversalClient) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		gauge("leaderboard_postgres_pool_connections", "Open PostgreSQL connections.", func() float64 { return float64(pool.Stat().TotalConns()) }),
		gauge("leaderboard_postgres_pool_acquired", "PostgreSQL connections in use.", func() float64 { return float64(pool.Stat().AcquiredConns()) }),
		gauge("leaderboard_postgres_pool_idle", "Idle PostgreSQL connections.", func() float64 { return float64(pool.Stat().IdleConns()) }),
		gauge("leaderboard_postgres_pool_max", "Maximum PostgreSQL connections.", func() float64 { return float64(pool.Stat().MaxConns()) }),
		counter("leaderboard_postgres_pool_acquire_wait_seconds_total", "Time spent waiting for a PostgreSQL connection.", func() float64 { return pool.Stat().AcquireDuration().Seconds() }),
		counter("leaderboard_postgres_pool_empty_acquires_total", "Acquires that had to wait for a connection.", func() float64 { return float64(pool.Stat().EmptyAcquireCount()) }),
		gauge("leaderboard_redis_pool_connections", "Open Redis connections.", func() float64 { return float64(rdb.PoolStats().TotalConns) }),
		gauge("leaderboard_redis_pool_idle", "Idle Redis connections.", func() float64 { return float64(rdb.PoolStats().IdleConns) }),
		counter("leaderboard_redis_pool_timeouts_total", "Waits for a Redis connection that timed out.", func() float64 { return float64(rdb.PoolStats().Timeouts) }),
		counter("leaderboard_redis_pool_misses_total", "Redis commands that had to open a connection.", func() float64 { return float64(rdb.PoolStats().Misses) }),
		gauge("leaderboard_dead_letters", "Dead letters waiting for an operator (counted at most every 2 s; -1 until counted, or when the count failed).",
			router.NewScrapeCount(2*time.Second, 10*time.Second, func(ctx context.Context) (n int64, err error) {
				err = pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters`).Scan(&n)
				return n, err
			}).Get),
	)
}
