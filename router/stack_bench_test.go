package router

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/metrics"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkProjectorChainStack runs messages through the projector's middleware chain as
// Watermill does, one new goroutine each, down to a handler that waits for its result
// the way ApplyScore.Handle waits for its batch. "presized" grows the goroutine's stack
// at the top of the chain (presizeStack), "grown-deep" lets it grow where the chain
// runs out of it:
//
//	go test -run '^$' -bench BenchmarkProjectorChainStack ./router/
func BenchmarkProjectorChainStack(b *testing.B) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	poison, err := middleware.PoisonQueueWithFilter(&capture{}, DeadLetterTopic, shouldPoison)
	if err != nil {
		b.Fatal(err)
	}
	chain := []message.HandlerMiddleware{NewStuckPartitions(time.Now).Middleware}
	chain = append(chain, projectorMiddleware(poison, NewLogger(logger), logger)...)
	chain = append(chain, metrics.NewPrometheusMetricsBuilder(prometheus.NewRegistry(), "bench", "watermill").NewRouterMiddleware().Middleware)
	var h message.HandlerFunc = func(msg *message.Message) ([]*message.Message, error) {
		return nil, waitLikeABatch(msg.Context())
	}
	for i := len(chain) - 1; i >= 0; i-- {
		h = chain[i](h)
	}
	for _, c := range []struct {
		name string
		h    message.HandlerFunc
	}{{"grown-deep", h}, {"presized", presizeStack(h)}} {
		b.Run(c.name, func(b *testing.B) {
			var wg sync.WaitGroup
			for b.Loop() {
				msg := message.NewMessage("uuid", []byte("{}"))
				wg.Add(1)
				go func() { // as message.(*handler).run starts handleMessage
					defer wg.Done()
					if _, err := c.h(msg); err != nil {
						b.Error(err)
					}
				}()
				wg.Wait()
			}
		})
	}
}

// benchIndex is 0, kept where the compiler cannot see it.
var benchIndex = 0

// waitLikeABatch takes about the stack ApplyScore.Handle, Batcher.Do and Batcher.Go take
// (some 500 bytes of frames) and waits on a reply and the message's context, as
// Pending.Wait does.
//
//go:noinline
func waitLikeABatch(ctx context.Context) error {
	var item [512]byte
	reply := make(chan byte, 1)
	reply <- item[benchIndex]
	select {
	case <-reply:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
