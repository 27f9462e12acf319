package storage

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pipe sends the Redis commands of concurrent requests together: each batch is one
// pipeline (split by node on a cluster), one round trip instead of one per command. The
// write path reads the entry's value and spends the user's rate limit on every write;
// through one Pipe both travel in the same pipelines.
type Pipe struct {
	batcher *Batcher[redis.Cmder, struct{}]
}

// pipeWorkers is how many pipelines a Pipe has in flight at most.
const pipeWorkers = 2

// pipeBatch is the most commands in one pipeline.
const pipeBatch = 256

// NewPipe sends through rdb, each pipeline bounded by timeout. A pipeline waits up to
// linger after its first command for more (0: it takes what is queued): fewer round trips
// for that much latency. Close stops it.
func NewPipe(rdb redis.UniversalClient, timeout, linger time.Duration) *Pipe {
	done := make([]Result[struct{}], pipeBatch) // every command's own answer is in the command
	return &Pipe{batcher: NewGatheringBatcher(pipeWorkers, pipeBatch, linger, func(cmds []redis.Cmder) []Result[struct{}] {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		send, spread := coalesceValueReads(ctx, cmds)
		// Each command keeps its own answer or error (redis.Nil, NOSCRIPT, a timeout),
		// whatever Pipelined returns.
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, c := range send {
				_ = p.Process(ctx, c)
			}
			return nil
		})
		spread()
		return done[:len(cmds)]
	})}
}

// Go queues cmd for the next pipeline and returns at once; once Wait on the answer
// returns nil, cmd holds its answer. On an error of Wait, cmd must be left alone (it may
// still be sent).
func (p *Pipe) Go(ctx context.Context, cmd redis.Cmder) Pending[struct{}] {
	return p.batcher.Go(ctx, cmd)
}

// Close stops the pipe once its queued commands are sent.
func (p *Pipe) Close() { p.batcher.Close() }

// pipedScripts runs scripts through a Pipe: EVALSHA calls (the rate limiter's through
// redis_rate, the board reads' through redis.Script) go in the pipe's pipelines; everything
// else (the EVAL fallback when Redis lost a script) goes straight to the client. The
// scripts and the reading of their answers stay their owners'.
type pipedScripts struct {
	redis.UniversalClient
	pipe *Pipe
}

// EvalSha runs the call in the next pipeline and answers as the client would.
func (p pipedScripts) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", sha, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if _, err := p.pipe.Go(ctx, cmd).Wait(ctx); err != nil {
		failed := redis.NewCmd(ctx, cmdArgs...) // cmd may still be sent: leave it alone
		failed.SetErr(err)
		return failed
	}
	return cmd
}
