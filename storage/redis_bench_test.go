package storage_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/openleaderboard/leaderboard/storage"
)

// The Redis scripts' cost, in Redis's own CPU time (INFO cpu), on a board of 20,000
// entries: go test -run '^$' -bench 'BenchmarkBoards' ./storage/ (add -benchtime 20000x
// for steadier figures). redis-µs/entry and redis-µs/read are what a projector batch and
// the write path's value reads cost Redis; ns/op is the caller's wall time. Redis's CPU
// counts whatever else it serves meanwhile: run it on a quiet Redis.

const benchBoardUsers = 20000

// benchBoard loads a board of benchBoardUsers entries with random scores and returns the
// store, its target and the scores.
func benchBoard(b *testing.B) (*storage.Boards, *redis.Client, storage.Target, []int64) {
	b.Helper()
	rdb, prefix := newTestRedis(b)
	boards := storage.NewBoards(rdb, prefix, 10)
	t := storage.Target{Board: "global", Period: "all_time"}
	scores := make([]int64, benchBoardUsers)
	states := make([]storage.EntryState, benchBoardUsers)
	now := time.Now()
	for u := range scores {
		scores[u] = rand.Int64N(1_000_000)
		states[u] = benchState(u, scores[u], 1, now)
	}
	done := false
	if _, err := boards.Load(testContext(b), t, func() ([]storage.EntryState, map[string]string, error) {
		if done {
			return nil, nil, nil
		}
		done = true
		return states, nil, nil
	}); err != nil {
		b.Fatal(err)
	}
	return boards, rdb, t, scores
}

func benchUser(u int) string { return fmt.Sprintf("user-%05d", u) }

func benchState(u int, score, version int64, at time.Time) storage.EntryState {
	return storage.EntryState{Board: "global", Period: "all_time", UserID: benchUser(u), Score: score, SortKey: score, Version: version, ReachedAt: at, UpdatedAt: at}
}

// redisCPU is Redis's CPU time so far (user + system), from INFO cpu.
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu: %s: %v", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkBoardsApply mirrors batches of raised scores of random users: 70 (a projector
// batch of one board at about 3,000 scores a second) and 2 (a board period among many, as
// in the mixed workload), one apply script call per batch.
func BenchmarkBoardsApply(b *testing.B) {
	for _, batch := range []int{70, 2} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchApply(b, batch) })
	}
}

func benchApply(b *testing.B, batch int) {
	boards, rdb, t, scores := benchBoard(b)
	ctx := context.Background() // testContext would end a long -benchtime
	version := int64(1)
	now := time.Now()
	states := make([]storage.EntryState, batch)
	cpu := redisCPU(b, rdb)
	b.ResetTimer()
	for b.Loop() {
		for i := range states {
			u := rand.IntN(benchBoardUsers)
			scores[u] += 1 + rand.Int64N(1000)
			version++
			states[i] = benchState(u, scores[u], version, now)
		}
		if r := boards.ApplyAll(ctx, []storage.MirrorGroup{{Target: t, States: states}}, nil)[0]; r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((redisCPU(b, rdb)-cpu).Microseconds())/float64(b.N*batch), "redis-µs/entry")
}

// BenchmarkBoardsValueReads reads the values of 16 random users at a time through a Pipe,
// as the write path does (one script call reads them all).
func BenchmarkBoardsValueReads(b *testing.B) {
	const reads = 16
	boards, rdb, _, _ := benchBoard(b)
	ctx := context.Background()
	pipe := storage.NewPipe(rdb, time.Second, 5*time.Millisecond)
	b.Cleanup(pipe.Close)
	values := storage.NewValueReader(boards, pipe)
	pending := make([]storage.ValueRead, reads)
	cpu := redisCPU(b, rdb)
	b.ResetTimer()
	for b.Loop() {
		for i := range pending {
			pending[i] = values.Read(ctx, storage.ValueKey{Board: "global", Period: "all_time", UserID: benchUser(rand.IntN(benchBoardUsers))})
		}
		for _, r := range pending {
			if v, err := r.Wait(ctx); err != nil || !v.OK {
				b.Fatalf("read value: %+v, %v", v, err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((redisCPU(b, rdb)-cpu).Microseconds())/float64(b.N*reads), "redis-µs/read")
}
