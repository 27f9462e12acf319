package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	lbhttp "github.com/openleaderboard/leaderboard/http"
	"github.com/openleaderboard/leaderboard/router"
	"github.com/openleaderboard/leaderboard/storage"
)

// deps are the connections and names every role shares.
type deps struct {
	cfg     configs.Config
	now     func() time.Time // the clock of periods
	logger  *slog.Logger
	pool    *pgxpool.Pool
	db      *sql.DB // database/sql over pool, for watermill-sql
	rdb     redis.UniversalClient
	boards  *storage.Boards
	schema  storage.OutboxSchema
	brokers []string
	topics  router.Topics
	reg     *prometheus.Registry
}

// serve runs the configured roles and, on ctx's end, shuts down in order: stop accepting
// HTTP, drain in-flight requests and the outbox, stop the routers, then close publishers
// and pools.
func serve(ctx context.Context, cfg configs.Config, logger *slog.Logger, now func() time.Time) error {
	logger.Info("starting leaderboard", "config", cfg)
	redis.SetLogger(newRedisLog(logger, time.Now)) // not plain text on stderr
	if cfg.UsesDevSecret() {
		logger.Warn("LEADERBOARD_JWT_SECRET is not set: using the documented development secret, accepted on a loopback address only; a proxy or tunnel to this address that adds no forwarding header (a bare nginx proxy_pass, socat, ssh -R) gives anyone who reaches it the admin API")
	}
	// The listen address first: a busy port fails before anything else starts.
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	defer ln.Close()
	if cfg.PprofAddr != "" {
		stop, err := servePprof(cfg.PprofAddr)
		if err != nil {
			return err
		}
		defer stop()
		logger.Info("pprof listening", "addr", cfg.PprofAddr)
	}
	// From here the process answers: /healthz 200 and /readyz "starting" until its roles
	// run, however long its stores take to answer.
	web := startHTTP(ln, logger)
	defer web.closeUnlessServing()
	d, closeDeps, err := openDeps(ctx, cfg, logger)
	d.now = now
	defer closeDeps()
	if err != nil {
		return stoppedWhileStarting(ctx, logger, err)
	}

	rctx, stopRoles := context.WithCancel(ctx)
	defer stopRoles()
	g, gctx := errgroup.WithContext(rctx)
	// A role that fails to start stops those started before it, and waits for them, before
	// serve returns (the pool's close waits for their connections).
	abort := func(err error) error {
		stopRoles()
		_ = g.Wait()
		return stoppedWhileStarting(ctx, logger, err)
	}
	ready := &readiness{pool: d.pool, boards: d.boards}
	if cfg.Runs(configs.RoleRelay) || cfg.Runs(configs.RoleProjector) {
		ready.brokers = d.brokers // the API role does without Kafka (runNotifier)
	}
	if cfg.Runs(configs.RoleRelay) {
		if err := startRelay(gctx, g, d, ready); err != nil {
			return abort(err)
		}
	}
	if cfg.Runs(configs.RoleProjector) {
		closeProjector, err := startProjector(gctx, g, d, ready)
		defer closeProjector()
		if err != nil {
			return abort(err)
		}
	}
	if cfg.Runs(configs.RoleAPI) {
		if err := startAPI(gctx, g, d, ready, web); err != nil {
			return abort(err)
		}
	} else {
		ops := lbhttp.NewOpsServer(lbhttp.Deps{Config: cfg, Logger: logger, Ready: ready.Failing, Registry: d.reg})
		web.serve(gctx, g, ops, nil)
	}

	err = g.Wait()
	logger.Info("leaderboard stopped", "err", err)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// poolCloseWait bounds how long a stop waits for the PostgreSQL pool to close.
const poolCloseWait = 5 * time.Second

// closePool closes the pool, waiting at most poolCloseWait: pgx closes a connection whose
// query was cancelled by sending a cancel request and reading the old one's answer for up
// to 15 s, which on a connection that no longer answers (a network partition, a failover
// that moved the server's address) is all 15 s, and pool.Close waits for every such
// close. The process ends anyway: the server drops those connections with it.
func closePool(pool interface{ Close() }, logger *slog.Logger) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pool.Close()
	}()
	select {
	case <-done:
	case <-time.After(poolCloseWait):
		logger.Warn("PostgreSQL connections still closing: not waiting for them", "waited", poolCloseWait.String())
	}
}

// openDeps connects to PostgreSQL (migrating it), Redis and Kafka (starting the embedded
// broker and creating the topics when asked). The returned func closes what was opened,
// also after an error.
func openDeps(ctx context.Context, cfg configs.Config, logger *slog.Logger) (deps, func(), error) {
	d := deps{cfg: cfg, logger: logger, schema: storage.NewOutboxSchema(), reg: prometheus.NewRegistry()}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	pool, err := storage.OpenPostgres(ctx, cfg.PostgresURL, int32(cfg.PostgresMaxConns))
	if err != nil {
		return d, closeAll, err
	}
	closers = append(closers, func() { closePool(pool, logger) })
	if err := storage.Migrate(ctx, pool, d.schema, cfg.OutboxShards); err != nil {
		return d, closeAll, err
	}
	// A relay with fewer shards than hold commands would leave them to nobody (an API with
	// fewer only writes to fewer: the relays forward every shard they run).
	if cfg.Runs(configs.RoleRelay) {
		if err := storage.CheckDroppedShards(ctx, pool, d.schema, cfg.OutboxShards); err != nil {
			return d, closeAll, err
		}
	}
	// An API writing with another shard count than the commands still waiting would put a
	// user's next command in another shard, where it could overtake them.
	if cfg.Runs(configs.RoleAPI) {
		if err := storage.RecordShardCount(ctx, pool, d.schema, cfg.OutboxShards); err != nil {
			return d, closeAll, err
		}
	}
	// Every process reads the boards file: none starts with a board whose entries it would
	// read with other rules than they were made under.
	defs := make([]storage.BoardDefinition, len(cfg.Boards))
	for i, b := range cfg.Boards {
		order := configs.OrderDesc
		if !b.Desc() {
			order = configs.OrderAsc
		}
		defs[i] = storage.BoardDefinition{ID: b.ID, Operator: b.Operator, Order: order, Period: b.Period, MinValue: b.MinValue, MaxValue: b.MaxValue}
	}
	if err := storage.RecordBoards(ctx, pool, d.schema, defs); err != nil {
		return d, closeAll, err
	}
	d.pool, d.db = pool, stdlib.OpenDBFromPool(pool)
	closers = append(closers, func() { _ = d.db.Close() })

	d.rdb, err = storage.OpenRedis(cfg.RedisURL, cfg.RedisClusterAddrs, cfg.RedisPoolSize, cfg.RedisTimeout)
	if err != nil {
		return d, closeAll, err
	}
	closers = append(closers, func() { _ = d.rdb.Close() })
	d.boards = storage.NewBoards(d.rdb, cfg.RedisPrefix, cfg.TopN)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if p := storage.EvictionPolicy(pctx, d.rdb); p != "" && p != "noeviction" {
		logger.Error("Redis may evict keys (maxmemory-policy "+p+"): a board period that loses some of its keys reads wrong ranks until a rebuild; set maxmemory-policy noeviction",
			"maxmemory_policy", p)
	}
	cancel()

	d.brokers = cfg.KafkaBrokers
	if cfg.EmbeddedKafka {
		_, portStr, _ := net.SplitHostPort(cfg.KafkaAddr)
		port, _ := strconv.Atoi(portStr)
		broker, err := router.StartEmbeddedKafka(cfg.KafkaDataDir, port)
		if err != nil {
			return d, closeAll, err
		}
		closers = append(closers, broker.Close)
		d.brokers = broker.Addrs()
		logger.Info("embedded kafka broker started", "addrs", d.brokers, "data_dir", cfg.KafkaDataDir)
	}
	d.topics = router.NewTopics(cfg.TopicPrefix, cfg.ScorePartitions)
	// The relay and projector create the topics; an API-only process does without Kafka
	// (its notifier waits for them), so it starts while Kafka is down or does not answer.
	if cfg.Runs(configs.RoleRelay) || cfg.Runs(configs.RoleProjector) {
		var settings router.TopicSettingsError
		switch err := router.EnsureTopics(ctx, d.brokers, d.topics); {
		case errors.As(err, &settings):
			logger.Warn("kafka topic settings not applied", "err", err)
		case err != nil:
			return d, closeAll, err
		}
	}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerStoreMetrics(d.reg, d.pool, d.rdb)
	return d, closeAll, nil
}

// stoppedWhileStarting is err of a start that failed, nil when it failed because the
// process was told to stop meanwhile (a stop asked for is not a failure).
func stoppedWhileStarting(ctx context.Context, logger *slog.Logger, err error) error {
	if ctx.Err() != nil {
		logger.Info("leaderboard stopped while starting", "err", err)
		return nil
	}
	return err
}

// servePprof serves pprof on addr; a taken address fails the start (as the API's does).
func servePprof(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen LEADERBOARD_PPROF_ADDR %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// pprof asks no credentials (its address is a loopback one), so a page whose host name
	// was made to resolve to 127.0.0.1 (DNS rebinding) must not read it from a browser.
	guarded := lbhttp.LoopbackOnly("pprof (LEADERBOARD_PPROF_ADDR) asks no credentials", "reach it on the machine or through kubectl port-forward", mux)
	srv := &http.Server{Handler: guarded, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// maxHeaderBytes bounds a request's headers (a bearer token is well under 2 KiB).
const maxHeaderBytes = 16 << 10

// web is the process's HTTP server, listening from the start (lbhttp.Front answers while
// the process starts).
type web struct {
	srv     *http.Server
	front   *lbhttp.Front
	served  chan error
	serving bool
}

func startHTTP(ln net.Listener, logger *slog.Logger) *web {
	w := &web{front: lbhttp.NewFront(), served: make(chan error, 1)}
	// No WriteTimeout: it would end healthy realtime streams; each stream write has its
	// own deadline instead.
	w.srv = &http.Server{Handler: w.front, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: maxHeaderBytes}
	logger.Info("http listening", "addr", ln.Addr().String())
	go func() { w.served <- w.srv.Serve(ln) }()
	return w
}

// closeUnlessServing closes the server when serve never took it over (the process did not
// start).
func (w *web) closeUnlessServing() {
	if !w.serving {
		_ = w.srv.Close()
		<-w.served
	}
}

// serve answers with h until ctx ends; then it runs beforeShutdown (ending long-lived
// requests such as streams), drains in-flight requests for up to 15 s and runs
// afterShutdown in order.
func (w *web) serve(ctx context.Context, g *errgroup.Group, h http.Handler, beforeShutdown func(), afterShutdown ...func()) {
	if beforeShutdown != nil {
		w.srv.RegisterOnShutdown(beforeShutdown)
	}
	w.front.Serve(h)
	w.serving = true
	g.Go(func() error {
		if err := <-w.served; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		err := w.srv.Shutdown(sctx)
		for _, f := range afterShutdown {
			f()
		}
		return err
	})
}
