package configs_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
)

// env returns a fake getenv over the given variables.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	for name, vars := range map[string]map[string]string{
		"unset": nil,
		// Blank values count as unset.
		"blank": {
			"LEADERBOARD_HTTP_ADDR": " ", "LEADERBOARD_POSTGRES_URL": "", "LEADERBOARD_REDIS_URL": "\t",
			"LEADERBOARD_KAFKA_BROKERS": "  ", "LEADERBOARD_ROLES": " ", "LEADERBOARD_TIMEZONE": "", "LEADERBOARD_JWT_SECRET": " ",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := configs.Load(env(vars))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			// The documented defaults (API.md, "Running it").
			if c.HTTPAddr != "127.0.0.1:8080" {
				t.Errorf("HTTPAddr = %q", c.HTTPAddr)
			}
			if c.PostgresURL != "postgres://postgres@127.0.0.1:5432/leaderboard?sslmode=disable" {
				t.Errorf("PostgresURL = %q", c.PostgresURL)
			}
			if c.RedisURL != "redis://127.0.0.1:6379/0" {
				t.Errorf("RedisURL = %q", c.RedisURL)
			}
			if !c.EmbeddedKafka || len(c.KafkaBrokers) != 0 {
				t.Errorf("EmbeddedKafka = %v, KafkaBrokers = %v; want embedded and no brokers", c.EmbeddedKafka, c.KafkaBrokers)
			}
			for _, r := range []string{configs.RoleAPI, configs.RoleRelay, configs.RoleProjector} {
				if !c.Runs(r) {
					t.Errorf("default roles do not include %s", r)
				}
			}
			if len(c.Roles) != 3 {
				t.Errorf("Roles = %v", c.Roles)
			}
			if c.Timezone == nil || c.Timezone.String() != "UTC" {
				t.Errorf("Timezone = %v, want UTC", c.Timezone)
			}
			if c.JWTSecret != configs.DevJWTSecret || !c.UsesDevSecret() {
				t.Errorf("JWTSecret = %q, want the documented development secret", c.JWTSecret)
			}
			if c.WaitTimeout != 5*time.Second {
				t.Errorf("WaitTimeout = %v, want the documented 5s", c.WaitTimeout)
			}
			// Trust (API.md): players 10 writes a minute, servers unlimited, fail closed,
			// signatures optional, event ids kept at least 24 h.
			if c.RateLimit != (configs.Rate{N: 10, Per: time.Minute}) || !c.ServerRateLimit.Off() || c.LimiterFailOpen || c.SigningSecret != "" {
				t.Errorf("limits: rate %v, server %v, fail open %v, signing %q", c.RateLimit, c.ServerRateLimit, c.LimiterFailOpen, c.SigningSecret)
			}
			if c.EventIDRetention < 24*time.Hour || c.HistoryRetention < c.EventIDRetention {
				t.Errorf("retention: event ids %v, history %v", c.EventIDRetention, c.HistoryRetention)
			}
			if c.OutboxShards < 1 || c.ScorePartitions < 1 || c.TopN < 10 || c.RedisPrefix == "" || c.TopicPrefix == "" {
				t.Errorf("internal defaults out of range: %+v", c)
			}
			b, ok := c.Board("global")
			if !ok || b.Operator != "best" || b.Period != "all_time" {
				t.Errorf("Board(global) = %+v, %v; want best all_time", b, ok)
			}
			if _, ok := c.Board("no-such-board"); ok {
				t.Errorf("Board(no-such-board) found")
			}
		})
	}
}

func TestLoadValidValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		vars  map[string]string
		check func(t *testing.T, c configs.Config)
	}{
		{"one role", map[string]string{"LEADERBOARD_ROLES": "relay"}, func(t *testing.T, c configs.Config) {
			if !c.Runs(configs.RoleRelay) || c.Runs(configs.RoleAPI) || c.Runs(configs.RoleProjector) {
				t.Errorf("Roles = %v, want relay only", c.Roles)
			}
		}},
		{"roles list with spaces", map[string]string{"LEADERBOARD_ROLES": " api , projector "}, func(t *testing.T, c configs.Config) {
			if !c.Runs(configs.RoleAPI) || !c.Runs(configs.RoleProjector) || c.Runs(configs.RoleRelay) {
				t.Errorf("Roles = %v, want api and projector", c.Roles)
			}
		}},
		{"timezone", map[string]string{"LEADERBOARD_TIMEZONE": "Europe/Paris"}, func(t *testing.T, c configs.Config) {
			if c.Timezone.String() != "Europe/Paris" {
				t.Errorf("Timezone = %v", c.Timezone)
			}
		}},
		{"brokers", map[string]string{"LEADERBOARD_KAFKA_BROKERS": "kafka-1:9092, kafka-2:9093"}, func(t *testing.T, c configs.Config) {
			if c.EmbeddedKafka || strings.Join(c.KafkaBrokers, ",") != "kafka-1:9092,kafka-2:9093" {
				t.Errorf("EmbeddedKafka = %v, KafkaBrokers = %q", c.EmbeddedKafka, c.KafkaBrokers)
			}
		}},
		{"secret of 32 bytes", map[string]string{"LEADERBOARD_JWT_SECRET": "0123456789abcdef0123456789abcdef"}, func(t *testing.T, c configs.Config) {
			if c.JWTSecret != "0123456789abcdef0123456789abcdef" || c.UsesDevSecret() {
				t.Errorf("JWTSecret = %q", c.JWTSecret)
			}
		}},
		{"development secret on loopback addresses", map[string]string{"LEADERBOARD_HTTP_ADDR": "[::1]:8080"}, func(t *testing.T, c configs.Config) {
			if !c.UsesDevSecret() {
				t.Errorf("JWTSecret = %q", c.JWTSecret)
			}
		}},
		{"development secret on localhost", map[string]string{"LEADERBOARD_HTTP_ADDR": "localhost:8080"}, func(t *testing.T, c configs.Config) {
			if !c.UsesDevSecret() {
				t.Errorf("JWTSecret = %q", c.JWTSecret)
			}
		}},
		{"development secret on 127.0.0.2", map[string]string{"LEADERBOARD_HTTP_ADDR": "127.0.0.2:8080"}, func(t *testing.T, c configs.Config) {
			if !c.UsesDevSecret() {
				t.Errorf("JWTSecret = %q", c.JWTSecret)
			}
		}},
		{"jwt max ttl and projector stuck bound", map[string]string{"LEADERBOARD_JWT_MAX_TTL": "2h", "LEADERBOARD_PROJECTOR_STUCK_AFTER": "30s"}, func(t *testing.T, c configs.Config) {
			if c.JWTMaxTTL != 2*time.Hour || c.ProjectorStuckAfter != 30*time.Second {
				t.Errorf("JWTMaxTTL %v, ProjectorStuckAfter %v", c.JWTMaxTTL, c.ProjectorStuckAfter)
			}
		}},
		{"wait timeout", map[string]string{"LEADERBOARD_WAIT_TIMEOUT": "30s"}, func(t *testing.T, c configs.Config) {
			if c.WaitTimeout != 30*time.Second {
				t.Errorf("wait timeout %v", c.WaitTimeout)
			}
		}},
		{"outbox shards", map[string]string{"LEADERBOARD_OUTBOX_SHARDS": "8"}, func(t *testing.T, c configs.Config) {
			if c.OutboxShards != 8 {
				t.Errorf("OutboxShards = %d", c.OutboxShards)
			}
		}},
		{"postgresql scheme and rediss", map[string]string{
			"LEADERBOARD_POSTGRES_URL": "postgresql://lb:pw@db.internal:5433/scores",
			"LEADERBOARD_REDIS_URL":    "rediss://cache.internal:6380/2",
			"LEADERBOARD_HTTP_ADDR":    ":9000",
			"LEADERBOARD_JWT_SECRET":   "a-production-secret-of-32-bytes!",
		}, func(t *testing.T, c configs.Config) {
			if c.PostgresURL != "postgresql://lb:pw@db.internal:5433/scores" || c.RedisURL != "rediss://cache.internal:6380/2" || c.HTTPAddr != ":9000" {
				t.Errorf("config = %+v", c)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := configs.Load(env(tt.vars))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestLoadRejectsBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		variable, value string
	}{
		{"LEADERBOARD_ROLES", "worker"},
		{"LEADERBOARD_ROLES", "api,reporter"},
		{"LEADERBOARD_ROLES", "API"},
		{"LEADERBOARD_ROLES", ","},
		{"LEADERBOARD_TIMEZONE", "Mars/Olympus_Mons"},
		{"LEADERBOARD_TIMEZONE", "not a zone"},
		{"LEADERBOARD_KAFKA_BROKERS", "nohostport"},
		{"LEADERBOARD_KAFKA_BROKERS", "kafka:9092,nohostport"},
		{"LEADERBOARD_KAFKA_BROKERS", "kafka:port"},
		{"LEADERBOARD_KAFKA_BROKERS", "kafka:70000"},
		{"LEADERBOARD_JWT_SECRET", "tooShortSecret"},
		{"LEADERBOARD_JWT_SECRET", "0123456789abcdef0123456789abcde"}, // 31 bytes
		{"LEADERBOARD_HTTP_ADDR", "0.0.0.0:8080"},                     // the development secret off loopback
		{"LEADERBOARD_JWT_MAX_TTL", "forever"},
		{"LEADERBOARD_PPROF_ADDR", ":6060"}, // every interface: pprof has no authentication
		{"LEADERBOARD_PPROF_ADDR", "0.0.0.0:6060"},
		{"LEADERBOARD_PROJECTOR_STUCK_AFTER", "10ms"},
		{"LEADERBOARD_OUTBOX_SHARDS", "two"},
		{"LEADERBOARD_OUTBOX_SHARDS", "1.5"},
		{"LEADERBOARD_OUTBOX_SHARDS", "0"},
		{"LEADERBOARD_OUTBOX_SHARDS", "-3"},
		{"LEADERBOARD_SCORE_PARTITIONS", "many"},
		{"LEADERBOARD_TOP_N", "5"},
		{"LEADERBOARD_TOP_N", "99"}, // a top read of 100 would not fit in the cached top
		{"LEADERBOARD_POSTGRES_URL", "mysql://root@127.0.0.1:3306/leaderboard"},
		{"LEADERBOARD_POSTGRES_URL", "http://127.0.0.1:5432/leaderboard"},
		{"LEADERBOARD_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432"}, // no database
		{"LEADERBOARD_POSTGRES_URL", "127.0.0.1:5432"},
		{"LEADERBOARD_REDIS_URL", "http://127.0.0.1:6379/0"},
		{"LEADERBOARD_HTTP_ADDR", "localhost"},
		{"LEADERBOARD_HTTP_ADDR", "localhost:http"},
		{"LEADERBOARD_LOG_LEVEL", "verbose"},
		{"LEADERBOARD_REDIS_PREFIX", "lb prod"},
		{"LEADERBOARD_TOPIC_PREFIX", "a/b"},
		{"LEADERBOARD_SSE_HEARTBEAT", "20s"},
		{"LEADERBOARD_SSE_HEARTBEAT", "soon"},
		{"LEADERBOARD_WAIT_TIMEOUT", "5"},
		{"LEADERBOARD_WAIT_TIMEOUT", "10ms"},
		{"LEADERBOARD_WAIT_TIMEOUT", "2m"},
		{"LEADERBOARD_RATE_LIMIT", "10"},
		{"LEADERBOARD_RATE_LIMIT", "0/60s"},
		{"LEADERBOARD_RATE_LIMIT", "10/100ms"},
		{"LEADERBOARD_RATE_LIMIT", "ten/60s"},
		{"LEADERBOARD_SERVER_RATE_LIMIT", "10/forever"},
		{"LEADERBOARD_LIMITER_FAIL_OPEN", "yes"},
		{"LEADERBOARD_SIGNING_SECRET", "short"},
		{"LEADERBOARD_EVENT_ID_RETENTION", "1h"},
		{"LEADERBOARD_HISTORY_RETENTION", "25h"}, // shorter than the event ids' 7 days
		{"LEADERBOARD_ANOMALIES_KEEP", "10"},
	}
	for _, tt := range tests {
		t.Run(tt.variable+"="+tt.value, func(t *testing.T) {
			t.Parallel()
			_, err := configs.Load(env(map[string]string{tt.variable: tt.value}))
			if err == nil {
				t.Fatalf("Load accepted %s=%q", tt.variable, tt.value)
			}
			if !strings.Contains(err.Error(), tt.variable) && !(tt.variable == "LEADERBOARD_HTTP_ADDR" && strings.Contains(err.Error(), "LEADERBOARD_JWT_SECRET")) {
				t.Errorf("error %q does not name %s", err, tt.variable)
			}
			// Only the bad variable is reported.
			for _, other := range []string{"LEADERBOARD_ROLES", "LEADERBOARD_TIMEZONE", "LEADERBOARD_KAFKA_BROKERS", "LEADERBOARD_JWT_SECRET",
				"LEADERBOARD_OUTBOX_SHARDS", "LEADERBOARD_POSTGRES_URL", "LEADERBOARD_REDIS_URL", "LEADERBOARD_HTTP_ADDR"} {
				if other != tt.variable && strings.Contains(err.Error(), other) && !(tt.value == "0.0.0.0:8080" && other == "LEADERBOARD_JWT_SECRET") {
					t.Errorf("error %q also blames %s", err, other)
				}
			}
		})
	}
}

func TestLoadReportsEveryBadValue(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"LEADERBOARD_ROLES":         "api,worker",
		"LEADERBOARD_TIMEZONE":      "Nowhere/City",
		"LEADERBOARD_KAFKA_BROKERS": "nohostport",
		"LEADERBOARD_JWT_SECRET":    "short",
		"LEADERBOARD_OUTBOX_SHARDS": "four",
		"LEADERBOARD_POSTGRES_URL":  "mysql://root@localhost/db",
	}
	_, err := configs.Load(env(bad))
	if err == nil {
		t.Fatal("Load accepted six bad values")
	}
	for name := range bad {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s:\n%v", name, err)
		}
	}
}

func TestLoadErrorsDoNotLeakSecrets(t *testing.T) {
	t.Parallel()
	_, err := configs.Load(env(map[string]string{
		"LEADERBOARD_JWT_SECRET":   "Sh0rtJwtKey",
		"LEADERBOARD_POSTGRES_URL": "mysql://root:PgPassw0rdLeak@localhost/db",
		"LEADERBOARD_REDIS_URL":    "http://:RedisPassw0rdLeak@localhost:6379",
	}))
	if err == nil {
		t.Fatal("Load accepted bad values")
	}
	for _, secret := range []string{"Sh0rtJwtKey", "PgPassw0rdLeak", "RedisPassw0rdLeak"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error text contains the secret %q: %v", secret, err)
		}
	}
}

func TestLogValueMasksSecrets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		vars    map[string]string
		secrets []string
		want    []string // visible parts that must still be logged
	}{
		{
			name: "jwt secret and userinfo passwords",
			vars: map[string]string{
				"LEADERBOARD_JWT_SECRET":   "JwtSecretValue-0123456789-abcdefgh",
				"LEADERBOARD_POSTGRES_URL": "postgres://lb:PgSecretPw@db.internal:5432/leaderboard?sslmode=disable",
				"LEADERBOARD_REDIS_URL":    "redis://default:RedisSecretPw@cache.internal:6379/0",
			},
			secrets: []string{"JwtSecretValue-0123456789-abcdefgh", "PgSecretPw", "RedisSecretPw"},
			want:    []string{"db.internal:5432", "cache.internal:6379", "127.0.0.1:8080"},
		},
		{
			name: "password only and escaped characters",
			vars: map[string]string{
				"LEADERBOARD_POSTGRES_URL": "postgres://lb:p%40ss%2FWordX@db.internal/leaderboard",
				"LEADERBOARD_REDIS_URL":    "redis://:RedisOnlyPw@cache.internal:6379/0",
			},
			secrets: []string{"p%40ss%2FWordX", "p@ss/WordX", "ss%2FWordX", "RedisOnlyPw", configs.DevJWTSecret},
			want:    []string{"db.internal", "cache.internal"},
		},
		{
			// pgx reads a password from the query string as well.
			name: "password in the query string",
			vars: map[string]string{
				"LEADERBOARD_POSTGRES_URL": "postgres://lb@db.internal:5432/leaderboard?sslmode=disable&password=QuerySecretPw",
			},
			secrets: []string{"QuerySecretPw"},
			want:    []string{"db.internal:5432"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := configs.Load(env(tt.vars))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			var buf bytes.Buffer
			slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})).Info("starting", "config", c)
			out := buf.String()
			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("log line is not JSON: %v\n%s", err, out)
			}
			if _, ok := rec["config"].(map[string]any); !ok {
				t.Fatalf("config was not logged as a group: %s", out)
			}
			for _, s := range tt.secrets {
				if strings.Contains(out, s) {
					t.Errorf("log contains the secret %q:\n%s", s, out)
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("log lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestTimezoneLocalIsRefused: LEADERBOARD_TIMEZONE must be an IANA zone that is
// "the same in every process (the API fixes a write's period)" (README). time.LoadLocation
// also takes "Local", which is no IANA zone but each host's own (its TZ variable or
// /etc/localtime): an API on a host in Europe/Berlin and one in UTC would then put writes
// of the same instant in different days and weeks, and GET /v1/boards reports the zone as
// "Local". Load must refuse it, as it refuses "Mars/Olympus_Mons".
func TestTimezoneLocalIsRefused(t *testing.T) {
	t.Parallel()
	c, err := configs.Load(env(map[string]string{"LEADERBOARD_TIMEZONE": "Local"}))
	if err == nil {
		t.Errorf("LEADERBOARD_TIMEZONE=Local accepted (timezone %q): each process would roll daily and weekly boards over at its host's midnight", c.Timezone)
	}
}

// TestSigningSecretIsNotTheJWTSecret: LEADERBOARD_SIGNING_SECRET is handed to game
// servers to sign increments (README "Signed increments"); LEADERBOARD_JWT_SECRET mints any
// token, admin included. Configured to the same value, whoever holds the signing key can
// sign an admin bearer token. Load must refuse the two being equal.
func TestSigningSecretIsNotTheJWTSecret(t *testing.T) {
	t.Parallel()
	const shared = "one-key-for-everything-0123456789abcdef"
	_, err := configs.Load(env(map[string]string{
		"LEADERBOARD_JWT_SECRET":     shared,
		"LEADERBOARD_SIGNING_SECRET": shared,
	}))
	if err == nil || !strings.Contains(err.Error(), "LEADERBOARD_SIGNING_SECRET") {
		t.Errorf("Load with LEADERBOARD_SIGNING_SECRET = LEADERBOARD_JWT_SECRET: %v; want a refusal naming LEADERBOARD_SIGNING_SECRET (its holder could mint admin tokens)", err)
	}
	// The published development secret as the signing key is the same mistake: anyone can
	// then sign increments.
	_, err = configs.Load(env(map[string]string{"LEADERBOARD_SIGNING_SECRET": configs.DevJWTSecret}))
	if err == nil || !strings.Contains(err.Error(), "LEADERBOARD_SIGNING_SECRET") {
		t.Errorf("Load with LEADERBOARD_SIGNING_SECRET = the published development JWT secret: %v; want a refusal", err)
	}
}

// TestAddressErrorsDoNotEchoCredentials: an operator who pastes a URL with
// credentials into LEADERBOARD_REDIS_CLUSTER_ADDRS or LEADERBOARD_KAFKA_BROKERS (both want
// host:port) gets a start-up error that prints the value as given, password included,
// into the logs (compose, systemd, Kubernetes keep stderr). The other URL variables are
// reported without their value (TestLoadErrorsDoNotLeakSecrets); these must be too.
func TestAddressErrorsDoNotEchoCredentials(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{
		"LEADERBOARD_REDIS_CLUSTER_ADDRS": "redis://default:ClusterPassw0rdLeak@redis-0.internal:6379",
		"LEADERBOARD_KAFKA_BROKERS":       "sasl_ssl://svc:KafkaPassw0rdLeak@kafka-0.internal:9093",
	} {
		_, err := configs.Load(env(map[string]string{name: value}))
		if err == nil {
			t.Errorf("%s=%q accepted", name, value)
			continue
		}
		for _, secret := range []string{"ClusterPassw0rdLeak", "KafkaPassw0rdLeak"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the error prints the password %q: %v", name, secret, err)
			}
		}
	}
	// user@host:port passes a host:port check (the host "user@host"): refused as a URL.
	if _, err := configs.Load(env(map[string]string{"LEADERBOARD_KAFKA_BROKERS": "svc@kafka-0.internal:9093"})); err == nil || strings.Contains(err.Error(), "svc@") {
		t.Errorf("LEADERBOARD_KAFKA_BROKERS=svc@kafka-0.internal:9093: %v, want refused without the value", err)
	}
}
