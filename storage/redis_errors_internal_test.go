package storage

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// replyError is an error reply as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

// TestRedisErrUnavailableReplies: the replies of a Redis that cannot serve now (a cluster
// down or failing over among them) are unavailability, which reads answer from
// PostgreSQL and the projector retries; a script's own error is not.
func TestRedisErrUnavailableReplies(t *testing.T) {
	for _, reply := range []string{"LOADING Redis is loading", "BUSY Redis is busy", "CLUSTERDOWN The cluster is down",
		"MASTERDOWN Link with MASTER is down", "TRYAGAIN Multiple keys request during rehashing", "READONLY You can't write against a read only replica.",
		"NOREPLICAS Not enough good replicas"} {
		if err := redisErr("op", replyError(reply)); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%q: %v, want unavailable", reply, err)
		}
	}
	for _, reply := range []string{"ERR user_script:1: bad", "WRONGTYPE Operation against a key holding the wrong kind of value", "NOSCRIPT No matching script"} {
		if err := redisErr("op", replyError(reply)); errors.Is(err, ErrUnavailable) {
			t.Errorf("%q: %v, want a script's own error", reply, err)
		}
	}
}
