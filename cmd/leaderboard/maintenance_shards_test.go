package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestMaintenanceUnderTheDefaultShardCount: `leaderboard consistency` (and
// `rebuild`), documented as run from a shell with the LEADERBOARD_* environment, relay
// nothing and need no outbox shard. Run without LEADERBOARD_OUTBOX_SHARDS (default 4)
// against a live deployment of 6 shards whose shard 5 holds a command on its way, it
// runs: only the service refuses a lower shard count (a first version of that check
// refused maintenance commands too. Found by a review).
func TestMaintenanceUnderTheDefaultShardCount(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	live := env.getenv(map[string]string{"LEADERBOARD_OUTBOX_SHARDS": "6"})
	var out bytes.Buffer
	if err := run(ctx, []string{"consistency", "-full"}, live, &out); err != nil { // creates the 6 shards' tables
		t.Fatalf("consistency with the deployment's 6 shards: %v\n%s", err, out.String())
	}
	schema := storage.NewOutboxSchema()
	table := schema.Messages.MessagesTable(schema.Topic(5))
	if _, err := env.db().Exec(ctx, `INSERT INTO `+table+` (uuid, payload, metadata, transaction_id) VALUES ('e-1', '{}', '{}', pg_current_xact_id())`); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	operator := env.getenv(map[string]string{"LEADERBOARD_OUTBOX_SHARDS": ""}) // unset: the default 4
	if err := run(ctx, []string{"consistency", "-full"}, operator, &out); err != nil {
		t.Fatalf("consistency from a shell without LEADERBOARD_OUTBOX_SHARDS while the service writes shard 5: %v", err)
	}
}

// TestRelayRefusesFewerShardsThanHoldCommands: a relay started with fewer shards than an
// outbox table holding a command not applied refuses to start (nothing would forward the
// command); an API process with that count starts (it only writes to fewer shards).
func TestRelayRefusesFewerShardsThanHoldCommands(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	var out bytes.Buffer
	if err := run(ctx, []string{"consistency", "-full"}, env.getenv(map[string]string{"LEADERBOARD_OUTBOX_SHARDS": "6"}), &out); err != nil {
		t.Fatalf("consistency with 6 shards: %v\n%s", err, out.String())
	}
	schema := storage.NewOutboxSchema()
	if _, err := env.db().Exec(ctx, `INSERT INTO `+schema.Messages.MessagesTable(schema.Topic(5))+` (uuid, payload, metadata, transaction_id)
		VALUES ('e-1', '{}', '{"partition_key":"u1"}', pg_current_xact_id())`); err != nil {
		t.Fatal(err)
	}
	relay := env.getenv(map[string]string{"LEADERBOARD_OUTBOX_SHARDS": "4", "LEADERBOARD_ROLES": "relay"})
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := run(rctx, []string{"serve"}, relay, io.Discard); err == nil || !strings.Contains(err.Error(), "shard 5") {
		t.Fatalf("a relay with 4 shards while shard 5 holds a command: %v, want a refusal naming shard 5", err)
	}
	svc := env.start(map[string]string{"LEADERBOARD_OUTBOX_SHARDS": "4", "LEADERBOARD_ROLES": "api"})
	if r := svc.do(t, "GET", "/healthz", "", ""); r.status != 200 {
		t.Fatalf("an API process with 4 shards: /healthz %d", r.status)
	}
}
