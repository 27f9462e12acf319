// Package configs holds the service configuration: one typed Config, loaded once
// from the environment, with defaults and validation.
package configs

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// DevJWTSecret is the documented development secret used when LEADERBOARD_JWT_SECRET
// is not set. Anyone can sign tokens with it, so it is accepted only while the API
// listens on a loopback address; the service logs a warning when it runs with it.
const DevJWTSecret = "leaderboard-dev-secret-change-me"

// MinJWTSecretBytes is the shortest LEADERBOARD_JWT_SECRET accepted (HS256 wants a key at
// least as long as its 32-byte output).
const MinJWTSecretBytes = 32

// RealtimeAudience is the aud of the short-lived tokens browsers put in a stream's URL
// (GET /v1/realtime/token): such a token opens streams and nothing else.
const RealtimeAudience = "realtime"

// Role names accepted in LEADERBOARD_ROLES.
const (
	RoleAPI       = "api"
	RoleRelay     = "relay"
	RoleProjector = "projector"
)

// EmbeddedKafka is the LEADERBOARD_KAFKA_BROKERS value that starts the in-process broker.
const EmbeddedKafka = "embedded"

// Config is the whole configuration of one leaderboard process.
type Config struct {
	HTTPAddr    string
	PostgresURL string
	RedisURL    string
	// RedisPrefix namespaces every Redis key of this deployment (tests use their own).
	RedisPrefix string
	// RedisClusterAddrs, when set, are the seed nodes of a Redis Cluster (RedisURL then
	// only gives credentials and TLS).
	RedisClusterAddrs []string
	// KafkaBrokers lists broker addresses; empty when EmbeddedKafka is true.
	KafkaBrokers []string
	// EmbeddedKafka starts the in-process Kafka-protocol broker.
	EmbeddedKafka bool
	// KafkaDataDir is where the embedded broker persists topics, offsets and messages.
	KafkaDataDir string
	// KafkaAddr is the listen address of the embedded broker.
	KafkaAddr string
	// TopicPrefix namespaces the Kafka topics.
	TopicPrefix string
	// ScorePartitions is the partition count of the score events topic; ProjectorWindow is
	// how many messages of one partition the projector keeps in flight (one user's at a time).
	ScorePartitions int
	ProjectorWindow int
	// OutboxShards is the number of outbox tables, each relayed by its own forwarder.
	OutboxShards int
	JWTSecret    string
	// JWTMaxTTL is the longest lifetime a bearer token may have (from iat, or from now).
	JWTMaxTTL time.Duration
	// JWTAudience, when set, is the audience a bearer token's aud must name: a token signed
	// with a secret other services share, for one of them, is refused here.
	JWTAudience string
	Roles       map[string]bool
	Timezone    *time.Location
	// TopN is how many entries the cached top of each board holds.
	TopN     int
	LogLevel string
	// PprofAddr, when set, serves net/http/pprof there (off by default).
	PprofAddr string
	// SSEHeartbeat is the comment interval on idle realtime streams.
	SSEHeartbeat time.Duration
	// WaitTimeout bounds how long POST /v1/scores?wait=true waits for the projection
	// before it answers 202.
	WaitTimeout time.Duration
	// SSEMaxStreams and SSEMaxStreamsPerUser cap this process's realtime streams.
	SSEMaxStreams        int
	SSEMaxStreamsPerUser int
	// ProjectorStuckAfter is how long a partition may keep failing on one message (with
	// transient errors) before /readyz reports the projector.
	ProjectorStuckAfter time.Duration
	// Boards are the board definitions (LEADERBOARD_BOARDS_FILE, or the shipped ones).
	Boards []Board
	// PastPeriodsInRedis is how many past periods of a daily, weekly or season board stay
	// in Redis besides the current one; older ones are read from PostgreSQL.
	PastPeriodsInRedis int
	// SeasonIdleTTL and MatchIdleTTL: Redis keeps a season or match board's keys this long
	// after its last write, then drops them (they are reloaded from PostgreSQL on demand).
	SeasonIdleTTL time.Duration
	MatchIdleTTL  time.Duration

	// RateLimit bounds player writes per user (LEADERBOARD_RATE_LIMIT); ServerRateLimit
	// bounds server-token writes per token subject (off by default).
	RateLimit       Rate
	ServerRateLimit Rate
	// LimiterFailOpen accepts player writes unlimited while the limiter's store (Redis) is
	// unreachable; by default they are refused with 503 limiter_unavailable.
	LimiterFailOpen bool
	// SigningSecret, when set, makes HMAC signatures of increments mandatory.
	SigningSecret string
	// EventIDRetention is how long accepted event ids answer retries (the request log);
	// HistoryRetention how long applied events stay in the history. Both are pruned in the
	// background every RetentionInterval.
	EventIDRetention  time.Duration
	HistoryRetention  time.Duration
	RetentionInterval time.Duration
	// AnomaliesKeep bounds the refusals kept for GET /admin/anomalies (the newest).
	AnomaliesKeep int

	// Tunables an operator may need on a bigger (or smaller) machine.

	// PostgresMaxConns bounds each process's PostgreSQL pool.
	PostgresMaxConns int
	// PostgresReads bounds the reads a process answers from PostgreSQL at once (periods
	// Redis does not keep, every read while Redis is down); each user's run one at a time.
	PostgresReads int
	// RedisPoolSize bounds each process's Redis pool; RedisTimeout bounds each Redis call
	// (a Redis that stops answering switches reads to PostgreSQL within it).
	RedisPoolSize int
	RedisTimeout  time.Duration
	// OutboxBatch bounds the commands of one outbox transaction (group commit);
	// OutboxLinger is how long one waits after its first command for more (0: none).
	OutboxBatch  int
	OutboxLinger time.Duration
	// ProjectorBatch bounds the events of one projector batch; ProjectorWorkers is how many
	// batches may be in flight at once.
	ProjectorBatch   int
	ProjectorWorkers int
	// ProjectorLinger is the longest a projector batch waits for more events after its
	// first; RelayLinger the longest time between two reads of an outbox shard while rows
	// keep coming and no batch fills. Both follow the load: the whole wait once, at the
	// rate events came lately, it gathers half a batch, proportionally less below. They
	// trade visibility latency under load for fewer, larger transactions and produce
	// requests (0: none).
	ProjectorLinger time.Duration
	RelayLinger     time.Duration
	// WriteLinger is how long the write path's Redis pipeline (each write's value read and
	// rate limit) waits after its first command for other writes' (0: none): fewer Redis
	// round trips for a little accept latency. Reads do not wait.
	WriteLinger time.Duration
	// RelayPollInterval is how soon a relay looks again at rows held back by a write
	// transaction still open (an idle relay waits for the outbox's notification);
	// OutboxPruneInterval is how often it deletes forwarded and applied outbox rows.
	RelayPollInterval   time.Duration
	OutboxPruneInterval time.Duration
	// RelayBatch bounds the rows the relay produces in one request.
	RelayBatch int
	// RelayThrottle and ProjectorThrottle cap how fast the relay forwards and the
	// projector consumes (off by default), so a catch-up after an outage or a bulk requeue
	// leaves room for live traffic.
	RelayThrottle     Rate
	ProjectorThrottle Rate
	// MaxBacklog is how many accepted commands may wait for the pipeline before writes are
	// refused with 503 backlog_full (0: never).
	MaxBacklog int
}

// Board returns the board with the given id.
//
// "match:{match_id}" names an instance of the match board (the board with period match),
// when the match id is valid.
func (c Config) Board(id string) (Board, bool) {
	if def, match, ok := strings.Cut(id, ":"); ok {
		for _, b := range c.Boards {
			if b.ID == def && b.Period == PeriodMatch && ValidMatchID(match) {
				b.Match = match
				return b, true
			}
		}
		return Board{}, false
	}
	for _, b := range c.Boards {
		if b.ID == id && b.Period != PeriodMatch {
			return b, true
		}
	}
	return Board{}, false
}

// Definition returns the definition of a board id as written in the boards file (match
// boards by their own id, "match"), for listings and metric labels.
func (c Config) Definition(id string) (Board, bool) {
	for _, b := range c.Boards {
		if b.ID == id {
			return b, true
		}
	}
	return Board{}, false
}

// Runs reports whether this process runs the given role.
func (c Config) Runs(role string) bool { return c.Roles[role] }

// Load reads the configuration from getenv (os.Getenv in production), applying defaults
// and validating every value. The error names the variable that is wrong.
func Load(getenv func(string) string) (Config, error) {
	get := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	var errs []error
	intVar := func(name string, def, min, max int) int {
		raw := get(name, strconv.Itoa(def))
		n, err := strconv.Atoi(raw)
		if err != nil || n < min || n > max {
			errs = append(errs, fmt.Errorf("%s=%q: want an integer from %d to %d", name, raw, min, max))
			return def
		}
		return n
	}
	durationVar := func(name string, def, min, max time.Duration) time.Duration {
		raw := get(name, def.String())
		d, err := time.ParseDuration(raw)
		if err != nil || d < min || d > max {
			errs = append(errs, fmt.Errorf("%s=%q: want a duration from %v to %v", name, raw, min, max))
			return def
		}
		return d
	}

	c := Config{
		HTTPAddr:             get("LEADERBOARD_HTTP_ADDR", "127.0.0.1:8080"),
		PostgresURL:          get("LEADERBOARD_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/leaderboard?sslmode=disable"),
		RedisURL:             get("LEADERBOARD_REDIS_URL", "redis://127.0.0.1:6379/0"),
		RedisPrefix:          get("LEADERBOARD_REDIS_PREFIX", "lb"),
		KafkaDataDir:         get("LEADERBOARD_KAFKA_DATA_DIR", ".data/kafka"),
		KafkaAddr:            get("LEADERBOARD_KAFKA_EMBEDDED_ADDR", "127.0.0.1:0"),
		TopicPrefix:          get("LEADERBOARD_TOPIC_PREFIX", "leaderboard"),
		ScorePartitions:      intVar("LEADERBOARD_SCORE_PARTITIONS", 16, 1, 1024),
		ProjectorWindow:      intVar("LEADERBOARD_PROJECTOR_WINDOW", 128, 1, 1024),
		OutboxShards:         intVar("LEADERBOARD_OUTBOX_SHARDS", 4, 1, 64),
		TopN:                 intVar("LEADERBOARD_TOP_N", 100, 100, 1000), // a top read takes up to 100
		JWTSecret:            get("LEADERBOARD_JWT_SECRET", DevJWTSecret),
		LogLevel:             get("LEADERBOARD_LOG_LEVEL", "info"),
		PprofAddr:            get("LEADERBOARD_PPROF_ADDR", ""),
		SSEMaxStreams:        intVar("LEADERBOARD_SSE_MAX_STREAMS", 19_000, 1, 1_000_000),
		SSEMaxStreamsPerUser: intVar("LEADERBOARD_SSE_MAX_STREAMS_PER_USER", 5, 1, 1000),
		PostgresMaxConns:     intVar("LEADERBOARD_POSTGRES_MAX_CONNS", 40, 4, 1000),
		PostgresReads:        intVar("LEADERBOARD_POSTGRES_READS", 4, 1, 1000),
		RedisPoolSize:        intVar("LEADERBOARD_REDIS_POOL_SIZE", 64, 4, 10_000),
		OutboxBatch:          intVar("LEADERBOARD_OUTBOX_BATCH", 256, 1, 10_000),
		ProjectorBatch:       intVar("LEADERBOARD_PROJECTOR_BATCH", 500, 1, 10_000),
		ProjectorWorkers:     intVar("LEADERBOARD_PROJECTOR_WORKERS", 2, 1, 64),
		PastPeriodsInRedis:   intVar("LEADERBOARD_REDIS_PAST_PERIODS", 2, 0, 366),
		Boards:               DefaultBoards(),
	}

	if c.PprofAddr != "" {
		switch err := checkHostPort(c.PprofAddr); {
		case err != nil:
			errs = append(errs, fmt.Errorf("LEADERBOARD_PPROF_ADDR=%q: %w", c.PprofAddr, err))
		case !IsLoopback(c.PprofAddr): // pprof asks no credentials, and a profile costs CPU
			errs = append(errs, fmt.Errorf("LEADERBOARD_PPROF_ADDR=%q: pprof has no authentication: want a loopback address (127.0.0.1:6060; kubectl port-forward reaches it)", c.PprofAddr))
		}
	}
	if err := checkHostPort(c.HTTPAddr); err != nil {
		errs = append(errs, fmt.Errorf("LEADERBOARD_HTTP_ADDR=%q: %w", c.HTTPAddr, err))
	}
	// The embedded broker (kfake) listens on 127.0.0.1 only: the variable gives its port.
	if err := checkHostPort(c.KafkaAddr); err != nil {
		errs = append(errs, fmt.Errorf("LEADERBOARD_KAFKA_EMBEDDED_ADDR=%q: %w", c.KafkaAddr, err))
	} else if !IsLoopback(c.KafkaAddr) {
		errs = append(errs, fmt.Errorf("LEADERBOARD_KAFKA_EMBEDDED_ADDR=%q: the embedded broker listens on 127.0.0.1 only; run Apache Kafka (LEADERBOARD_KAFKA_BROKERS) for other hosts", c.KafkaAddr))
	}
	if u, err := url.Parse(c.PostgresURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || strings.Trim(u.Path, "/") == "" {
		errs = append(errs, fmt.Errorf("LEADERBOARD_POSTGRES_URL: want postgres://user@host:port/dbname"))
	}
	if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		errs = append(errs, fmt.Errorf("LEADERBOARD_REDIS_URL: want redis://host:port/db"))
	}

	if raw := get("LEADERBOARD_REDIS_CLUSTER_ADDRS", ""); raw != "" {
		for i, a := range strings.Split(raw, ",") {
			a = strings.TrimSpace(a)
			if err := checkAddress(a); err != nil {
				// Not the value: one pasted from a URL may hold a password.
				errs = append(errs, fmt.Errorf("LEADERBOARD_REDIS_CLUSTER_ADDRS: address %d is not host:port", i+1))
				continue
			}
			c.RedisClusterAddrs = append(c.RedisClusterAddrs, a)
		}
	}

	brokers := get("LEADERBOARD_KAFKA_BROKERS", EmbeddedKafka)
	if brokers == EmbeddedKafka {
		c.EmbeddedKafka = true
	} else {
		for i, b := range strings.Split(brokers, ",") {
			b = strings.TrimSpace(b)
			if err := checkAddress(b); err != nil {
				errs = append(errs, fmt.Errorf("LEADERBOARD_KAFKA_BROKERS: broker %d is not host:port", i+1))
				continue
			}
			c.KafkaBrokers = append(c.KafkaBrokers, b)
		}
	}

	c.Roles = map[string]bool{}
	for _, r := range strings.Split(get("LEADERBOARD_ROLES", "all"), ",") {
		switch r = strings.TrimSpace(r); r {
		case "all":
			c.Roles[RoleAPI], c.Roles[RoleRelay], c.Roles[RoleProjector] = true, true, true
		case RoleAPI, RoleRelay, RoleProjector:
			c.Roles[r] = true
		default:
			errs = append(errs, fmt.Errorf("LEADERBOARD_ROLES: unknown role %q (want api, relay, projector or all)", r))
		}
	}

	c.SSEHeartbeat = durationVar("LEADERBOARD_SSE_HEARTBEAT", 15*time.Second, 100*time.Millisecond, 15*time.Second)
	c.WaitTimeout = durationVar("LEADERBOARD_WAIT_TIMEOUT", 5*time.Second, 100*time.Millisecond, time.Minute)
	c.JWTMaxTTL = durationVar("LEADERBOARD_JWT_MAX_TTL", 24*time.Hour, time.Minute, 30*24*time.Hour)
	c.JWTAudience = get("LEADERBOARD_JWT_AUDIENCE", "")
	switch {
	case c.JWTAudience == RealtimeAudience:
		errs = append(errs, fmt.Errorf("LEADERBOARD_JWT_AUDIENCE=%s: the audience of the service's own realtime tokens, which open streams only", RealtimeAudience))
	case len(c.JWTAudience) > 200 || strings.ContainsFunc(c.JWTAudience, unicode.IsControl):
		errs = append(errs, fmt.Errorf("LEADERBOARD_JWT_AUDIENCE: at most 200 bytes, without control characters"))
	}
	c.ProjectorStuckAfter = durationVar("LEADERBOARD_PROJECTOR_STUCK_AFTER", time.Minute, time.Second, time.Hour)
	c.RedisTimeout = durationVar("LEADERBOARD_REDIS_TIMEOUT", 300*time.Millisecond, 10*time.Millisecond, 10*time.Second)
	c.RelayPollInterval = durationVar("LEADERBOARD_RELAY_POLL_INTERVAL", 20*time.Millisecond, time.Millisecond, 10*time.Second)
	c.ProjectorLinger = durationVar("LEADERBOARD_PROJECTOR_LINGER", 40*time.Millisecond, 0, time.Second)
	c.RelayLinger = durationVar("LEADERBOARD_RELAY_LINGER", 200*time.Millisecond, 0, time.Second)
	c.OutboxLinger = durationVar("LEADERBOARD_OUTBOX_LINGER", 6*time.Millisecond, 0, 100*time.Millisecond)
	c.WriteLinger = durationVar("LEADERBOARD_WRITE_LINGER", 4*time.Millisecond, 0, 100*time.Millisecond)
	c.SeasonIdleTTL = durationVar("LEADERBOARD_SEASON_IDLE_TTL", 30*24*time.Hour, time.Minute, 365*24*time.Hour)
	c.MatchIdleTTL = durationVar("LEADERBOARD_MATCH_IDLE_TTL", time.Hour, 10*time.Second, 30*24*time.Hour)
	if path := get("LEADERBOARD_BOARDS_FILE", ""); path != "" {
		raw, err := os.ReadFile(path)
		if err == nil {
			c.Boards, err = ParseBoards(raw)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("LEADERBOARD_BOARDS_FILE=%q: %w", path, err))
			c.Boards = DefaultBoards()
		}
	}
	rateVar := func(name, def string) Rate {
		raw := get(name, def)
		r, err := ParseRate(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%w", name, err))
		}
		return r
	}
	c.RelayThrottle = rateVar("LEADERBOARD_RELAY_THROTTLE", "off")
	c.ProjectorThrottle = rateVar("LEADERBOARD_PROJECTOR_THROTTLE", "off")
	c.RelayBatch = intVar("LEADERBOARD_RELAY_BATCH", 500, 1, 10_000)
	c.MaxBacklog = intVar("LEADERBOARD_MAX_BACKLOG", 200_000, 0, 100_000_000)
	c.RateLimit = rateVar("LEADERBOARD_RATE_LIMIT", "10/60s")
	c.ServerRateLimit = rateVar("LEADERBOARD_SERVER_RATE_LIMIT", "off")
	switch raw := get("LEADERBOARD_LIMITER_FAIL_OPEN", "false"); raw {
	case "true", "false":
		c.LimiterFailOpen = raw == "true"
	default:
		errs = append(errs, fmt.Errorf("LEADERBOARD_LIMITER_FAIL_OPEN=%q: want true or false", raw))
	}
	c.SigningSecret = getenv("LEADERBOARD_SIGNING_SECRET") // as given: spaces are key bytes
	if c.SigningSecret != "" && len(c.SigningSecret) < MinSigningSecretBytes {
		errs = append(errs, fmt.Errorf("LEADERBOARD_SIGNING_SECRET: want at least %d bytes, got %d", MinSigningSecretBytes, len(c.SigningSecret)))
	}
	c.EventIDRetention = durationVar("LEADERBOARD_EVENT_ID_RETENTION", 7*24*time.Hour, 24*time.Hour, 10*365*24*time.Hour)
	c.HistoryRetention = durationVar("LEADERBOARD_HISTORY_RETENTION", 90*24*time.Hour, 24*time.Hour, 10*365*24*time.Hour)
	if c.HistoryRetention < c.EventIDRetention {
		errs = append(errs, fmt.Errorf("LEADERBOARD_HISTORY_RETENTION=%s: want at least LEADERBOARD_EVENT_ID_RETENTION (%s): the history guards exactly-once application as long as a command can come back", c.HistoryRetention, c.EventIDRetention))
	}
	c.RetentionInterval = durationVar("LEADERBOARD_RETENTION_INTERVAL", 10*time.Minute, time.Second, 24*time.Hour)
	c.AnomaliesKeep = intVar("LEADERBOARD_ANOMALIES_KEEP", 100_000, 100, 100_000_000)
	c.OutboxPruneInterval = durationVar("LEADERBOARD_OUTBOX_PRUNE_INTERVAL", 5*time.Second, 100*time.Millisecond, 24*time.Hour)

	tz := get("LEADERBOARD_TIMEZONE", "UTC")
	loc, err := time.LoadLocation(tz)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("LEADERBOARD_TIMEZONE=%q: not an IANA time zone", tz))
		loc = time.UTC
	case loc == time.Local:
		// Each host's own zone: processes on hosts set differently would put one instant's
		// writes into different days.
		errs = append(errs, fmt.Errorf("LEADERBOARD_TIMEZONE=%q: name an IANA time zone (the same in every process), not the host's", tz))
		loc = time.UTC
	}
	c.Timezone = loc

	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("LEADERBOARD_LOG_LEVEL=%q: want debug, info, warn or error", c.LogLevel))
	}
	if !validName(c.RedisPrefix) {
		errs = append(errs, fmt.Errorf("LEADERBOARD_REDIS_PREFIX=%q: want letters, digits, '_', '-' or '.'", c.RedisPrefix))
	}
	if !validName(c.TopicPrefix) {
		errs = append(errs, fmt.Errorf("LEADERBOARD_TOPIC_PREFIX=%q: want letters, digits, '_', '-' or '.'", c.TopicPrefix))
	}
	if c.SigningSecret != "" && (c.SigningSecret == c.JWTSecret || c.SigningSecret == DevJWTSecret) {
		// The game servers holding it could mint any token, admin included (or, the
		// development secret being published, anyone could sign increments).
		errs = append(errs, errors.New("LEADERBOARD_SIGNING_SECRET: want a key of its own, not LEADERBOARD_JWT_SECRET nor the development secret"))
	}
	switch {
	case !c.Runs(RoleAPI): // a relay or a projector checks no token: it needs no key
		if c.UsesDevSecret() {
			c.JWTSecret = ""
		}
	case c.UsesDevSecret() && checkHostPort(c.HTTPAddr) == nil && !IsLoopback(c.HTTPAddr):
		errs = append(errs, fmt.Errorf("LEADERBOARD_JWT_SECRET: the development secret is published and accepted only while the API listens on a loopback address, not on %q: set a secret of at least %d bytes (for example: openssl rand -hex 32)", c.HTTPAddr, MinJWTSecretBytes))
	case len(c.JWTSecret) < MinJWTSecretBytes:
		errs = append(errs, fmt.Errorf("LEADERBOARD_JWT_SECRET: want at least %d bytes, got %d", MinJWTSecretBytes, len(c.JWTSecret)))
	}
	return c, errors.Join(errs...)
}

// checkAddress checks a host:port of a cluster node or broker: no URL (a scheme, a path or
// user:password@, which a host:port check alone may take for a host).
func checkAddress(a string) error {
	if strings.ContainsAny(a, "@/") {
		return errors.New("not host:port")
	}
	return checkHostPort(a)
}

// IsLoopback reports whether a listen address (host:port) accepts connections from this
// machine only: a loopback IP or localhost. An empty host listens on every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// UsesDevSecret reports whether the JWT secret is the documented development one.
func (c Config) UsesDevSecret() bool { return c.JWTSecret == DevJWTSecret }

// LogValue masks secrets when the configuration is logged with slog.
func (c Config) LogValue() slog.Value {
	roles := make([]string, 0, len(c.Roles))
	for _, r := range []string{RoleAPI, RoleRelay, RoleProjector} {
		if c.Roles[r] {
			roles = append(roles, r)
		}
	}
	kafka := strings.Join(c.KafkaBrokers, ",")
	if c.EmbeddedKafka {
		kafka = EmbeddedKafka + " (" + c.KafkaDataDir + ")"
	}
	return slog.GroupValue(
		slog.String("http_addr", c.HTTPAddr),
		slog.String("postgres_url", maskURL(c.PostgresURL)),
		slog.String("redis_url", maskURL(c.RedisURL)),
		slog.String("redis_prefix", c.RedisPrefix),
		slog.String("kafka_brokers", kafka),
		slog.String("topic_prefix", c.TopicPrefix),
		slog.Int("score_partitions", c.ScorePartitions),
		slog.Int("projector_window", c.ProjectorWindow),
		slog.Int("outbox_shards", c.OutboxShards),
		slog.String("jwt_secret", "***"),
		slog.Bool("signing_secret", c.SigningSecret != ""),
		slog.String("rate_limit", c.RateLimit.String()),
		slog.String("roles", strings.Join(roles, ",")),
		slog.String("timezone", c.Timezone.String()),
	)
}

func maskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "***"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "***")
	}
	q := u.Query()
	for k := range q {
		if strings.Contains(strings.ToLower(k), "password") || strings.Contains(strings.ToLower(k), "secret") {
			q.Set(k, "***")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// checkHostPort accepts host:port with a numeric port (the host may be empty).
func checkHostPort(addr string) error {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port")
	}
	if port, err := strconv.Atoi(portStr); err != nil || port < 0 || port > 65535 {
		return errors.New("want host:port with a numeric port")
	}
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}
