package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/handlers"
	lbhttp "github.com/openleaderboard/leaderboard/http"
	"github.com/openleaderboard/leaderboard/router"
	"github.com/openleaderboard/leaderboard/storage"
)

// run is the whole program; main only wires signals and the environment into it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	cfg, err := configs.Load(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	switch cmd {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return nil
	case "serve":
		return serve(ctx, cfg, newLogger(cfg, stdout))
	case "healthcheck":
		return healthcheck(ctx, cfg)
	case "token":
		return token(cfg, args[1:], stdout)
	case "rebuild", "consistency":
		return maintenance(ctx, cfg, cmd, args[1:], stdout)
	default:
		usage(stdout)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

func newLogger(cfg configs.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

func healthcheck(ctx context.Context, cfg configs.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+cfg.HTTPAddr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz answered %s", resp.Status)
	}
	return nil
}

// serve builds every dependency by hand, runs the configured roles, and on ctx's end
// shuts down in order: stop accepting HTTP, drain in-flight requests and the outbox,
// stop the routers, then close publishers and pools.
func serve(ctx context.Context, cfg configs.Config, logger *slog.Logger) error {
	logger.Info("starting leaderboard", "config", cfg)
	if cfg.UsesDevSecret() {
		logger.Warn("LEADERBOARD_JWT_SECRET is not set: using the documented development secret, accepted on a loopback address only")
	}
	// The listen address first: a busy port fails before anything else starts.
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	defer ln.Close()

	pool, err := storage.OpenPostgres(ctx, cfg.PostgresURL, 40)
	if err != nil {
		return err
	}
	defer pool.Close()
	schema := storage.NewOutboxSchema()
	if err := storage.Migrate(ctx, pool, schema, cfg.OutboxShards); err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()

	ropts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return fmt.Errorf("redis url: %w", err)
	}
	ropts.PoolSize = 64
	ropts.MaxRetries = 1
	// Short timeouts: a Redis that stops answering switches reads to PostgreSQL within a second.
	ropts.DialTimeout, ropts.ReadTimeout, ropts.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	boards := storage.NewBoards(rdb, cfg.RedisPrefix, cfg.TopN)

	brokers := cfg.KafkaBrokers
	if cfg.EmbeddedKafka {
		_, portStr, _ := net.SplitHostPort(cfg.KafkaAddr)
		port, _ := strconv.Atoi(portStr)
		broker, err := router.StartEmbeddedKafka(cfg.KafkaDataDir, port)
		if err != nil {
			return err
		}
		defer broker.Close()
		brokers = broker.Addrs()
		logger.Info("embedded kafka broker started", "addrs", brokers, "data_dir", cfg.KafkaDataDir)
	}
	topics := router.NewTopics(cfg.TopicPrefix, cfg.ScorePartitions)
	if err := router.EnsureTopics(brokers, topics); err != nil {
		return err
	}

	if cfg.PprofAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		psrv := &http.Server{Addr: cfg.PprofAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = psrv.ListenAndServe() }()
		defer psrv.Close()
		logger.Info("pprof listening", "addr", cfg.PprofAddr)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerStoreMetrics(reg, pool, rdb)

	g, gctx := errgroup.WithContext(ctx)
	var running []func() bool
	var checks []check

	if cfg.Runs(configs.RoleRelay) {
		relay, err := router.NewRelay(db, storage.NewOutboxMaintenance(pool, schema), schema, router.RelayConfig{
			Shards: cfg.OutboxShards, Brokers: brokers,
		}, reg, logger)
		if err != nil {
			return err
		}
		g.Go(func() error { return relay.Run(gctx) })
		maint := storage.NewTableMaintenance(pool, schema, cfg.OutboxShards, 15*time.Second, logger)
		g.Go(func() error {
			if err := maint.Run(gctx); err != nil && gctx.Err() == nil {
				logger.Warn("table maintenance stopped", "err", err)
			}
			return nil
		})
		running = append(running, func() bool { return isClosed(relay.Running()) })
	}

	if cfg.Runs(configs.RoleProjector) {
		wlog := router.NewLogger(logger)
		sub, err := router.NewKafkaSubscriber(brokers, router.ProjectorGroup, wlog)
		if err != nil {
			return err
		}
		changes, err := router.NewKafkaPublisher(brokers, wlog)
		if err != nil {
			return err
		}
		apply := handlers.NewApplyScore(storage.NewProjection(pool), boards, changes, handlers.ApplyScoreConfig{
			Boards: cfg.Boards, ChangesTopic: topics.Notifications, UsersTopic: topics.UserUpdates,
		}, reg, logger)
		stuck := router.NewStuckPartitions(time.Now)
		reg.MustRegister(stuck)
		projector, err := router.NewProjectorRouter(sub, topics.Scores, apply.Handle, storage.NewDeadLetters(pool), stuck, reg, logger)
		if err != nil {
			return err
		}
		lag, closeLag, err := router.NewConsumerLagCollector(brokers, router.ProjectorGroup, topics.Scores)
		if err != nil {
			return err
		}
		defer closeLag() //nolint:errcheck
		reg.MustRegister(lag)
		g.Go(func() error {
			err := projector.Run(gctx)
			apply.Close()
			return errors.Join(err, changes.Close())
		})
		running = append(running, projector.IsRunning)
		checks = append(checks, check{"projector", func() bool { return stuck.Longest() <= cfg.ProjectorStuckAfter }})
	}

	if !cfg.Runs(configs.RoleAPI) {
		ops := lbhttp.NewOpsServer(lbhttp.Deps{Config: cfg, Logger: logger, Ready: readiness(pool, boards, brokers, running, checks), Registry: reg})
		serveHTTP(gctx, g, ln, ops, logger, nil)
	}

	if cfg.Runs(configs.RoleAPI) {
		batchSize := prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leaderboard_outbox_batch_size", Help: "Commands per outbox transaction (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9)})
		commitTime := prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "leaderboard_outbox_commit_seconds", Help: "Time of one outbox transaction.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)})
		reg.MustRegister(batchSize, commitTime)
		outbox := storage.NewOutbox(db, schema, storage.OutboxConfig{
			Shards: cfg.OutboxShards, DestinationTopic: topics.Scores,
			Observe: func(n int, took time.Duration) { batchSize.Observe(float64(n)); commitTime.Observe(took.Seconds()) },
		}, logger)
		hub := lbhttp.NewHub(lbhttp.HubConfig{MaxStreams: cfg.SSEMaxStreams, MaxStreamsPerUser: cfg.SSEMaxStreamsPerUser}, boards, reg)
		notifier, err := router.NewNotifierRouter(brokers, topics,
			handlers.NotifyTopChanged{Feed: hub, Logger: logger}.Handle,
			handlers.NotifyScoresApplied{Feed: hub, Logger: logger}.Handle, reg, logger)
		if err != nil {
			return err
		}
		g.Go(func() error { return notifier.Run(gctx) })
		running = append(running, notifier.IsRunning)
		handler := lbhttp.NewServer(lbhttp.Deps{
			Config: cfg, Logger: logger, Commands: outbox, Boards: boards,
			Requests: requestLog{db: db, projection: storage.NewProjection(pool)},
			Ready:    readiness(pool, boards, brokers, running, checks), Registry: reg, WaitTimeout: cfg.WaitTimeout,
			Hub: hub, Realtime: lbhttp.RealtimeConfig{Heartbeat: cfg.SSEHeartbeat},
			DeadLetters: storage.NewDeadLetterAdmin(db, schema, cfg.OutboxShards),
			Fallback:    storage.NewRanks(pool),
			Maintenance: storage.Maintenance{Boards: boards, Ranks: storage.NewRanks(pool), Audit: storage.NewAuditLog(pool)},
		})
		serveHTTP(gctx, g, ln, handler, logger, hub.Close, outbox.Close)
	}

	err = g.Wait()
	logger.Info("leaderboard stopped", "err", err)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// maxHeaderBytes bounds a request's headers (a bearer token is well under 2 KiB).
const maxHeaderBytes = 16 << 10

// serveHTTP serves h on ln until ctx ends; then it runs beforeShutdown (ending long-lived
// streams), drains in-flight requests and runs afterShutdown.
func serveHTTP(ctx context.Context, g *errgroup.Group, ln net.Listener, h http.Handler, logger *slog.Logger, beforeShutdown func(), afterShutdown ...func()) {
	// No WriteTimeout: it would end healthy realtime streams; each stream write has its
	// own deadline instead.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: maxHeaderBytes}
	if beforeShutdown != nil {
		srv.RegisterOnShutdown(beforeShutdown)
	}
	logger.Info("http listening", "addr", ln.Addr().String())
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		for _, f := range afterShutdown {
			f()
		}
		return err
	})
}

// requestLog answers the API's idempotency and ?wait=true look-ups.
type requestLog struct {
	db         storage.DBTX
	projection *storage.Projection
}

func (r requestLog) LookupRequest(ctx context.Context, userID, eventID string) ([]byte, error) {
	return storage.LookupRequest(ctx, r.db, userID, eventID)
}

func (r requestLog) IsApplied(ctx context.Context, userID, eventID string) (bool, error) {
	return r.projection.IsApplied(ctx, userID, eventID)
}

// check is a named readiness condition of a role.
type check struct {
	name string
	ok   func() bool
}

func readiness(pool *pgxpool.Pool, boards *storage.Boards, brokers []string, running []func() bool, checks []check) func(context.Context) []string {
	return func(ctx context.Context) []string {
		var failing []string
		if err := pool.Ping(ctx); err != nil {
			failing = append(failing, "postgres")
		}
		if err := boards.Ping(ctx); err != nil {
			failing = append(failing, "redis")
		}
		if !kafkaReachable(ctx, brokers) {
			failing = append(failing, "kafka")
		}
		for _, r := range running {
			if !r() {
				failing = append(failing, "routers")
				break
			}
		}
		for _, c := range checks {
			if !c.ok() {
				failing = append(failing, c.name)
			}
		}
		return failing
	}
}

func kafkaReachable(ctx context.Context, brokers []string) bool {
	var d net.Dialer
	for _, b := range brokers {
		if c, err := d.DialContext(ctx, "tcp", b); err == nil {
			c.Close()
			return true
		}
	}
	return false
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
