package router

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openleaderboard/leaderboard/storage"
)

// TestRelayForwardsEveryShardOnTheSmallestPool: on the smallest pool the configuration
// accepts (LEADERBOARD_POSTGRES_MAX_CONNS=4) with the default 4 shards, the relay forwards
// every shard. Its claims held pooled connections for as long as they forwarded, its
// listener one more, and each claim's rewind took another from the pool: three claims and
// the listener took every connection, the claimed shards waited a minute for one to rewind,
// gave up and claimed again, and the last shard never got a session; its commands were
// never forwarded while the relay reported itself running (found by a review). A claim
// holds a connection of its own now, and rewinds on it.
func TestRelayForwardsEveryShardOnTheSmallestPool(t *testing.T) {
	_, small, schema, broker, topics := newRelayEnv(t, "relay-review18-pool")
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	cfg := small.Config()
	cfg.MaxConns = 4 // LEADERBOARD_POSTGRES_MAX_CONNS=4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := storage.Migrate(ctx, pool, schema, 4); err != nil {
		t.Fatal(err)
	}
	for shard := range 4 { // one command in each shard, all of user u1
		table := schema.Messages.MessagesTable(schema.Topic(shard))
		if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (uuid, payload, metadata, transaction_id) VALUES ($1, '{}', '{"partition_key": "u1"}', pg_current_xact_id())`,
			fmt.Sprintf("shard-%d", shard)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewRelay(storage.NewOutboxMaintenance(pool, schema), RelayConfig{Shards: 4, Brokers: broker.Addrs(), Topic: topics.Scores}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	runRelay(ctx, t, r)

	wait, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	got := map[string]bool{}
	for _, id := range userOrderInKafkaUntil(wait, broker, topics.Scores, "u1", 4) {
		got[id] = true
	}
	if len(got) != 4 {
		t.Fatalf("after 30 s the relay forwarded %v of the 4 shards' commands; a relay forwards a command within milliseconds", got)
	}
}

// userOrderInKafkaUntil returns the uuids of the first n messages keyed user on partition 0
// of topic, in order, or what it has when ctx ends.
func userOrderInKafkaUntil(ctx context.Context, broker *EmbeddedKafka, topic, user string, n int) []string {
	cfg := sarama.NewConfig()
	cfg.Version = KafkaVersion
	consumer, err := sarama.NewConsumer(broker.Addrs(), cfg)
	if err != nil {
		return nil
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		return nil
	}
	defer pc.Close()
	var got []string
	for len(got) < n {
		select {
		case m := <-pc.Messages():
			if string(m.Key) != user {
				continue
			}
			for _, h := range m.Headers {
				if string(h.Key) == "_watermill_message_uuid" {
					got = append(got, string(h.Value))
				}
			}
		case <-ctx.Done():
			return got
		}
	}
	return got
}
