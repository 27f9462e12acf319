package router

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openleaderboard/leaderboard/storage"
	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

// TestRelayWaitsForOlderTransactions: a row committed while an older transaction that
// writes the outbox is still open is not forwarded before that transaction's row, so a
// user's commands reach Kafka in commit order and none is skipped.
func TestRelayWaitsForOlderTransactions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, storagetest.FromEnv(os.Getenv).NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema := storage.NewOutboxSchema()
	if err := storage.Migrate(ctx, pool, schema, 1); err != nil {
		t.Fatal(err)
	}
	broker, err := StartEmbeddedKafka("", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	topics := NewTopics("relay-test", 1)
	if err := EnsureTopics(broker.Addrs(), topics); err != nil {
		t.Fatal(err)
	}
	outbox := storage.NewOutboxMaintenance(pool, schema)
	r, err := NewRelay(outbox, RelayConfig{Shards: 1, Brokers: broker.Addrs(), Topic: topics.Scores}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer r.producer.Close()
	table := schema.Messages.MessagesTable(schema.Topic(0))
	insert := `INSERT INTO ` + table + ` (uuid, payload, metadata, transaction_id) VALUES ($1, '{}', '{"partition_key": "u1"}', pg_current_xact_id())`

	older, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer older.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit a no-op; on a failure it frees the connection pool.Close waits for
	if _, err := older.Exec(ctx, insert, "first"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, insert, "second"); err != nil { // commits while the older one is open
		t.Fatal(err)
	}
	claim, err := outbox.Claim(ctx, 0)
	if err != nil || claim == nil {
		t.Fatalf("claim: %v, %v", claim, err)
	}
	defer claim.Close()
	if other, err := outbox.Claim(ctx, 0); err != nil || other != nil {
		t.Fatalf("a second claim of the shard: %v, %v; want none: one relay forwards a shard", other, err)
	}
	n, pending, err := r.forward(ctx, claim)
	if err != nil || n != 0 || !pending {
		t.Fatalf("with an older transaction open: forwarded %d, pending %v, %v; want nothing forwarded, pending", n, pending, err)
	}
	if err := older.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Both once no transaction older than them is open anywhere on the server (the
	// snapshot's xmin is cluster-wide, so another test's transaction begun between the two
	// may hold the second back briefly: then the first goes alone, in order).
	for total := 0; total < 2; {
		if n, pending, err = r.forward(ctx, claim); err != nil || total+n > 2 || (total+n < 2 && !pending) {
			t.Fatalf("after it committed: forwarded %d after %d, pending %v, %v; want both", n, total, pending, err)
		}
		if total += n; total < 2 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if n, _, err = r.forward(ctx, claim); err != nil || n != 0 {
		t.Fatalf("again: forwarded %d, %v; want nothing: the position moved", n, err)
	}

	cfg := sarama.NewConfig()
	cfg.Version = KafkaVersion
	consumer, err := sarama.NewConsumer(broker.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topics.Scores, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var got []string
	for len(got) < 2 {
		select {
		case m := <-pc.Messages():
			for _, h := range m.Headers {
				if string(h.Key) == "_watermill_message_uuid" {
					got = append(got, string(h.Value))
				}
			}
			if string(m.Key) != "u1" {
				t.Errorf("key %q, want the partition key u1", m.Key)
			}
		case <-ctx.Done():
			t.Fatalf("Kafka has %v", got)
		}
	}
	if got[0] != "first" || got[1] != "second" {
		t.Fatalf("Kafka order %v, want [first second]", got)
	}
}
