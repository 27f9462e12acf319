package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// registerStoreMetrics exports the PostgreSQL and Redis connection pools at scrape time,
// and the number of dead letters waiting as last counted (deadLetterCount).
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
			newDeadLetterCount(pool).get),
	)
}

// deadLetterCount counts the dead letters off the scrape's path: a scrape (anonymous, on
// the API's address) answers the last count and starts another when it is over 2 s old,
// one at a time, so scrapers never hold the pool's connections (with the table slow or
// locked, a count per scrape held one each, and players' writes waited behind them).
type deadLetterCount struct {
	pool    *pgxpool.Pool
	value   atomic.Int64 // -1: not counted, or the count failed
	started atomic.Int64 // unix ns of the last count started
	busy    atomic.Bool
}

func newDeadLetterCount(pool *pgxpool.Pool) *deadLetterCount {
	d := &deadLetterCount{pool: pool}
	d.value.Store(-1)
	return d
}

func (d *deadLetterCount) get() float64 {
	now := time.Now().UnixNano()
	if now-d.started.Load() > int64(2*time.Second) && d.busy.CompareAndSwap(false, true) {
		d.started.Store(now)
		go func() {
			defer d.busy.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var n int64
			if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters`).Scan(&n); err != nil {
				n = -1
			}
			d.value.Store(n)
		}()
	}
	return float64(d.value.Load())
}
