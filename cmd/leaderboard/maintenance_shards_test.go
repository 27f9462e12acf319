package main

import (
	"bytes"
	"context"
	"testing"

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
