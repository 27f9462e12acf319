package configs_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/router"
)

// loadCompose loads compose.yaml with compose-go (Docker is not needed), with a JWT secret
// in the environment as `make up` asks for.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{"../compose.yaml"},
		cli.WithWorkingDirectory(".."), cli.WithName("leaderboard"),
		cli.WithEnv([]string{"LEADERBOARD_JWT_SECRET=compose-test-secret-0123456789-abcd"}), cli.WithInterpolation(true))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestComposeStack loads compose.yaml with compose-go (Docker is not needed) and checks
// the stack: services and images, health checks and start order, the service's roles,
// environment names and values that configs accepts, ports, and the topics it creates.
func TestComposeStack(t *testing.T) {
	p := loadCompose(t)
	svc := func(name string) types.ServiceConfig {
		s, ok := p.Services[name]
		if !ok {
			t.Fatalf("compose.yaml has no service %q", name)
		}
		return s
	}

	for _, name := range []string{"postgres", "redis", "kafka", "prometheus"} {
		s := svc(name)
		if s.Image == "" || s.HealthCheck == nil || len(s.HealthCheck.Test) == 0 {
			t.Errorf("%s: image %q, health check %v", name, s.Image, s.HealthCheck)
		}
	}
	if cmd := strings.Join(svc("redis").Command, " "); !strings.Contains(cmd, "--appendonly yes") {
		t.Errorf("redis runs without AOF: %q", cmd)
	}
	if roles := svc("kafka").Environment["KAFKA_PROCESS_ROLES"]; roles == nil || *roles != "broker,controller" {
		t.Errorf("kafka is not a single KRaft node: %v", roles)
	}
	topics := router.NewTopics("leaderboard", 24)
	init := strings.Join(svc("kafka-init").Command, " ")
	for _, topic := range []string{topics.Scores, topics.Notifications, topics.UserUpdates} {
		if !strings.Contains(init, "--topic "+topic) {
			t.Errorf("kafka-init does not create %s", topic)
		}
	}
	if p := *svc("api-1").Environment["LEADERBOARD_SCORE_PARTITIONS"]; !strings.Contains(init, "--topic "+topics.Scores+" --partitions "+p+" ") {
		t.Errorf("kafka-init does not create %s with the %s partitions the service is configured for", topics.Scores, p)
	}
	if !strings.Contains(init, "cleanup.policy=compact,delete --config retention.ms=86400000") {
		t.Errorf("notifications topic is not compacted and kept a day")
	}

	// Every name configs reads, by asking Load which names it looks up.
	known := map[string]bool{}
	if _, err := configs.Load(func(k string) string { known[k] = true; return "" }); err != nil {
		t.Fatal(err)
	}
	wantRoles := map[string]string{"api-1": "api", "api-2": "api", "relay": "relay", "projector": "projector"}
	ports := map[uint32]bool{}
	for name, role := range wantRoles {
		s := svc(name)
		if s.Build == nil || s.HealthCheck == nil || strings.Join(s.HealthCheck.Test, " ") != "CMD /leaderboard healthcheck" {
			t.Errorf("%s: build %v, health check %v", name, s.Build, s.HealthCheck)
		}
		for _, dep := range []string{"postgres", "redis"} {
			if s.DependsOn[dep].Condition != types.ServiceConditionHealthy {
				t.Errorf("%s does not wait for %s to be healthy", name, dep)
			}
		}
		if s.DependsOn["kafka-init"].Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s does not wait for the topics", name)
		}
		env := map[string]string{}
		for k, v := range s.Environment {
			if strings.HasPrefix(k, "LEADERBOARD_") && !known[k] {
				t.Errorf("%s sets %s, which configs does not read", name, k)
			}
			if v != nil {
				env[k] = *v
			}
		}
		cfg, err := configs.Load(func(k string) string { return env[k] })
		if err != nil {
			t.Errorf("%s: configs rejects the compose environment: %v", name, err)
			continue
		}
		// The published development secret must not start a compose API; a relay or a
		// projector, which checks no token, holds no secret at all.
		devEnv := func(k string) string {
			if k == "LEADERBOARD_JWT_SECRET" {
				return configs.DevJWTSecret
			}
			return env[k]
		}
		devCfg, err := configs.Load(devEnv)
		switch {
		case role == "api" && (err == nil || !strings.Contains(err.Error(), "LEADERBOARD_JWT_SECRET")):
			t.Errorf("%s: compose accepts the development secret: %v", name, err)
		case role != "api" && (err != nil || devCfg.JWTSecret != ""):
			t.Errorf("%s under the development secret: %v, secret %q kept", name, err, devCfg.JWTSecret)
		}
		if cfg.EmbeddedKafka || cfg.UsesDevSecret() || !cfg.Runs(role) || len(cfg.Roles) != 1 {
			t.Errorf("%s: embedded kafka %v, dev secret %v, roles %v", name, cfg.EmbeddedKafka, cfg.UsesDevSecret(), cfg.Roles)
		}
		for _, port := range s.Ports {
			if port.Target != 8080 {
				t.Errorf("%s publishes container port %d, the service listens on 8080", name, port.Target)
			}
			if port.HostIP != "127.0.0.1" {
				// Plain HTTP carrying bearer tokens: this machine only by default.
				t.Errorf("%s publishes port %s on %q, want 127.0.0.1 unless LEADERBOARD_PUBLISH_ADDR is set", name, port.Published, port.HostIP)
			}
			published := port.Published
			if ports[mustPort(t, published)] {
				t.Errorf("host port %s published twice", published)
			}
			ports[mustPort(t, published)] = true
		}
	}
	if !ports[8080] {
		t.Error("the API is not published on host port 8080")
	}
}

func mustPort(t *testing.T, s string) uint32 {
	t.Helper()
	var n uint32
	for _, r := range s {
		if r < '0' || r > '9' {
			t.Fatalf("port %q", s)
		}
		n = n*10 + uint32(r-'0')
	}
	return n
}

// TestComposePublishesOnlyTheAPI: compose publishes Prometheus on every host
// interface ("9090:9090"). Prometheus asks no credentials: anyone who reaches the machine
// can run arbitrary PromQL (CPU and memory of the Prometheus container), list the internal
// targets, and read the relay's and projector's metrics, which compose deliberately does
// not publish. Only the API replicas are meant to be reachable from outside (through a
// proxy, or with LEADERBOARD_PUBLISH_ADDR: TestComposeStack); Prometheus should be bound
// to the host's loopback (127.0.0.1:9090:9090) or not published.
func TestComposePublishesOnlyTheAPI(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		if name == "api-1" || name == "api-2" {
			continue
		}
		for _, port := range s.Ports {
			if ip := net.ParseIP(port.HostIP); ip == nil || !ip.IsLoopback() {
				t.Errorf("compose publishes %s's port %d on host address %q (every interface): bind it to 127.0.0.1 or do not publish it",
					name, port.Target, port.HostIP)
			}
		}
	}
}
