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

// TestBoardsFileKeepsEndpointBoardsShaped: a boards file may define the boards endpoints
// name by id (global, points, daily, season, match) only in the shape those endpoints rely
// on: points as a best board made the increments keep the largest delta, daily as a weekly
// board made /v1/daily-leaderboard answer weeks.
func TestBoardsFileKeepsEndpointBoardsShaped(t *testing.T) {
	for _, def := range []string{
		`{"id": "global", "operator": "incr", "period": "all_time"}`,
		`{"id": "points", "operator": "best", "period": "all_time"}`,
		`{"id": "daily", "operator": "incr", "period": "weekly"}`,
		`{"id": "season", "operator": "incr", "period": "all_time"}`,
		`{"id": "match", "operator": "incr", "period": "daily"}`,
	} {
		if _, err := configs.ParseBoards([]byte(`{"boards": [` + def + `]}`)); err == nil {
			t.Errorf("%s accepted", def)
		}
	}
	if _, err := configs.ParseBoards([]byte(`{"boards": [{"id": "global", "operator": "best", "order": "asc", "period": "weekly"}, {"id": "laps", "operator": "set", "period": "daily"}]}`)); err != nil {
		t.Errorf("a global best board of weeks, and a board no endpoint names: %v", err)
	}
}
