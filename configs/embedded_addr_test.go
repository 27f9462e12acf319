package configs_test

import (
	"testing"

	"github.com/openleaderboard/leaderboard/configs"
)

// TestEmbeddedKafkaAddrIsChecked: a LEADERBOARD_KAFKA_EMBEDDED_ADDR that is not a
// loopback host:port stops the service with a message naming the variable (it was taken
// as given, and the broker listened on a random port, or on 127.0.0.1 whatever host it
// named).
func TestEmbeddedKafkaAddrIsChecked(t *testing.T) {
	for _, v := range []string{"9092", "localhost:ninety", "127.0.0.1:99999", "0.0.0.0:9092"} {
		if _, err := configs.Load(env(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": v})); err == nil {
			t.Errorf("LEADERBOARD_KAFKA_EMBEDDED_ADDR=%q accepted", v)
		}
	}
	for _, v := range []string{"127.0.0.1:0", "localhost:9092", "[::1]:19092"} {
		if _, err := configs.Load(env(map[string]string{"LEADERBOARD_KAFKA_EMBEDDED_ADDR": v})); err != nil {
			t.Errorf("LEADERBOARD_KAFKA_EMBEDDED_ADDR=%q refused: %v", v, err)
		}
	}
}
