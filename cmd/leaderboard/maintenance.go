package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"time"

	"github.com/openleaderboard/leaderboard/configs"
	lbhttp "github.com/openleaderboard/leaderboard/http"
	"github.com/openleaderboard/leaderboard/storage"
)

// maintenance runs `rebuild` or `consistency` against PostgreSQL and Redis directly, for
// operators without HTTP access. consistency exits non-zero when the board differs.
func maintenance(ctx context.Context, cfg configs.Config, cmd string, args []string, stdout io.Writer, now func() time.Time) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stdout)
	boardID := fs.String("board", "global", "board id (match:{id} for a match)")
	periodID := fs.String("period", "", "period (default: the current one; \"previous\" for the one before)")
	full := fs.Bool("full", false, "consistency: compare every entry, not a sample")
	sample := fs.Int("sample", 1000, "consistency: entries to sample")
	if err := fs.Parse(args); err != nil {
		return err
	}
	board, ok := cfg.Board(*boardID)
	if !ok {
		return fmt.Errorf("%s: unknown board %q", cmd, *boardID)
	}
	pool, err := storage.OpenPostgres(ctx, cfg.PostgresURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := storage.Migrate(ctx, pool, storage.NewOutboxSchema(), cfg.OutboxShards); err != nil {
		return err
	}
	rdb, err := storage.OpenRedis(cfg.RedisURL, cfg.RedisClusterAddrs, 4, cfg.RedisTimeout)
	if err != nil {
		return err
	}
	defer rdb.Close()
	m := storage.Maintenance{Boards: storage.NewBoards(rdb, cfg.RedisPrefix, cfg.TopN), Ranks: storage.NewRanks(pool), Audit: storage.NewAuditLog(pool)}
	actor := cliActor()
	periods := lbhttp.NewPeriods(cfg, storage.NewSeasons(pool), now)
	period, err := periods.Resolve(ctx, board, *periodID)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	ttl, hot, err := periods.InRedis(ctx, board, period)
	if err != nil {
		return err
	}
	if !hot {
		return fmt.Errorf("%s: period %s of board %s is not kept in Redis (reads of it come from PostgreSQL)", cmd, period, board.Key())
	}
	target := storage.Target{Board: board.Key(), Period: period, TTL: ttl}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if cmd == "rebuild" {
		res, err := m.Rebuild(ctx, actor, target)
		if err != nil {
			return err
		}
		return enc.Encode(map[string]any{"board": res.Board, "period": res.Period, "entries": res.Entries, "version": res.Version, "took_ms": res.Duration.Milliseconds()})
	}
	rep, err := m.CheckConsistency(ctx, actor, target, *full, *sample)
	if err != nil {
		return err
	}
	if err := enc.Encode(rep); err != nil {
		return err
	}
	if !rep.Consistent {
		return fmt.Errorf("board %s period %s differs between Redis and PostgreSQL", target.Board, target.Period)
	}
	return nil
}

// cliActor names the operator of a CLI run in the audit trail: "cli:" and the OS user.
func cliActor() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	return "cli:" + name
}
