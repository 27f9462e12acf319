package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// OpenRedis returns the Redis client: a Redis Cluster client when clusterAddrs are given
// (rawURL then only lends its credentials and TLS settings), a single server's otherwise.
// Every script of the service keeps its keys in one hash slot (a board's keys share the
// {board} tag; a limiter's key is one key), so both work alike.
func OpenRedis(rawURL string, clusterAddrs []string, poolSize int, timeout time.Duration) (redis.UniversalClient, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	if len(clusterAddrs) == 0 {
		opts.PoolSize, opts.MaxRetries = poolSize, 1
		opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = timeout, timeout, timeout
		return redis.NewClient(opts), nil
	}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: clusterAddrs, Username: opts.Username, Password: opts.Password, TLSConfig: opts.TLSConfig,
		PoolSize: poolSize, MaxRetries: 1, MaxRedirects: 3,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
	}), nil
}

// EvictionPolicy is Redis's maxmemory-policy, "" when Redis does not tell (unreachable, or
// CONFIG disabled, as on some managed services). The mirror needs noeviction: a board
// period that loses one of its keys (its entries but not its sorted set, one bucket) reads
// wrong ranks until a rebuild, where a period lost whole is loaded again on demand.
func EvictionPolicy(ctx context.Context, rdb redis.UniversalClient) string {
	m, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return ""
	}
	return m["maxmemory-policy"]
}
