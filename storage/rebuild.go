package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RebuildResult says what a rebuild loaded.
type RebuildResult struct {
	Board    string        `json:"board"`
	Period   string        `json:"period"`
	Entries  int64         `json:"entries"`
	Version  int64         `json:"version"`
	Duration time.Duration `json:"-"`
}

// ErrRebuildRunning is returned when another rebuild of the same board and period holds
// the rebuild lock.
var ErrRebuildRunning = errors.New("a rebuild of this board is already running")

// rebuildLockTTL bounds how long a crashed rebuild keeps the lock (and keeps the projector
// writing the shadow keys); a running rebuild refreshes it every third of that.
const rebuildLockTTL = 60 * time.Second

// refreshLockScript extends the rebuild lock while its owner still holds it.
var refreshLockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)

// rebuildLockScript takes the rebuild lock (the marker, with a lifetime) unless another
// rebuild holds it; taken, it drops the renames noted for loads that ended (none is under
// way): the projector notes the renames it applies while the marker exists (applyScript),
// and the rebuild's pages take them over the names they read. KEYS: rebuild marker, loads
// under way, renames. ARGV: token, lifetime ms.
var rebuildLockScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('DEL', KEYS[3]) end
return 1
`)

// abortRebuildScript ends a rebuild that failed before its swap, if it still holds the
// lock: the marker goes (a retry need not wait for it to expire, and the projector stops
// writing the shadow) and the shadow keys with it, and the renames noted unless a load is
// under way.
// KEYS: rebuild marker, shadow z, u, n, m, removals, loads under way, renames. ARGV: token.
var abortRebuildScript = redis.NewScript(entryHashesLua + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local o = hashes(KEYS[3])
for i = 1, bucketCount(o) - 1 do redis.call('DEL', bucketKey(o, i)) end
local n = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
if redis.call('EXISTS', KEYS[7]) == 0 then redis.call('DEL', KEYS[8]) end
return n
`)

// Rebuild rebuilds a board's Redis state from PostgreSQL into shadow keys while the
// projector keeps writing (it writes to both while the rebuild marker exists, with the
// version guard), then swaps the shadow in atomically. Readers never see a half-built
// board and no update made during the rebuild is lost. The marker is also the rebuild's
// lock: a second rebuild of the same board and period gets ErrRebuildRunning, and only
// the holder may swap its shadow in.
func (b *Boards) Rebuild(ctx context.Context, src *Ranks, t Target) (RebuildResult, error) {
	start := time.Now()
	k := b.keys(t.Board, t.Period)
	token := strconv.FormatInt(start.UnixNano(), 36) + "-" + strconv.FormatUint(rand.Uint64(), 36)
	ok, err := rebuildLockScript.Run(ctx, b.rdb, []string{k.rebuild, k.loading, k.renamed}, token, rebuildLockTTL.Milliseconds()).Int()
	if err != nil {
		return RebuildResult{}, redisErr("rebuild: lock", err)
	}
	if ok == 0 {
		return RebuildResult{}, ErrRebuildRunning
	}
	lockCtx, stopRefresh := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRefresh()
	go b.holdLock(lockCtx, k.rebuild, token)
	swapped := false
	defer func() {
		if !swapped {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = abortRebuildScript.Run(actx, b.rdb, []string{k.rebuild, k.zs, k.us, k.ns, k.ms, k.goneS, k.loading, k.renamed}, token).Err()
		}
	}()

	if err := dropScript.Run(ctx, b.rdb, []string{k.zs, k.us, k.ns, k.ms}).Err(); err != nil {
		return RebuildResult{}, redisErr("rebuild: clear shadow", err)
	}
	res := RebuildResult{Board: t.Board, Period: t.Period}
	next := src.pages(ctx, t.Board, t.Period, 2000)
	counted := func() ([]EntryState, map[string]string, error) {
		states, nicks, err := next()
		res.Entries += int64(len(states))
		return states, nicks, err
	}
	expected, err := src.count(ctx, t.Board, t.Period)
	if err != nil {
		return RebuildResult{}, err
	}
	if _, err := b.loadPages(ctx, []string{k.zs, k.us, k.ns, k.ms, k.goneS, k.top, k.ver, k.loading, k.renamed}, counted, expected, 0, ""); err != nil {
		return RebuildResult{}, err
	}
	out, err := swapScript.Run(ctx, b.rdb, []string{k.z, k.u, k.n, k.m, k.top, k.rebuild, k.zs, k.us, k.ns, k.ms, k.ver, k.loading, k.renamed},
		b.topN, time.Now().UnixMicro(), token, t.TTL.Milliseconds()).Slice()
	if err != nil {
		return RebuildResult{}, redisErr("rebuild: swap", err)
	}
	if out[0].(int64) == -1 {
		return RebuildResult{}, fmt.Errorf("rebuild: lost the rebuild lock before the swap; nothing was swapped in")
	}
	swapped = true
	res.Version, res.Duration = out[1].(int64), time.Since(start)
	return res, nil
}

// Reload loads a board period that is not in Redis (never loaded, expired, or lost) from
// PostgreSQL, and marks it loaded: load on demand, for readers and the projector alike.
// Concurrent reloads of one period are harmless (the writes are version-guarded).
// First it holds again the users of admin adjustments and removals still on their way
// there (Hold): Redis lost their holds with the period, and the entries it loads are from
// before those commands, which a lower best score was answered unchanged against and
// dropped. A hold taken again after its command was applied lasts its TTL: the user's
// writes skip the unchanged shortcut meanwhile, nothing more.
func (b *Boards) Reload(ctx context.Context, src *Ranks, t Target) (Top, error) {
	held, err := src.pendingHolds(ctx, t.Board, t.Period)
	if err != nil {
		return Top{}, err
	}
	for _, h := range held {
		if _, err := b.Hold(ctx, t.Board, t.Period, h[0], h[1]); err != nil {
			return Top{}, err
		}
	}
	expected, err := src.count(ctx, t.Board, t.Period)
	if err != nil {
		return Top{}, err
	}
	return b.load(ctx, t, src.pages(ctx, t.Board, t.Period, 2000), expected)
}

// holdLock refreshes the rebuild lock until ctx ends.
func (b *Boards) holdLock(ctx context.Context, key, token string) {
	t := time.NewTicker(rebuildLockTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = refreshLockScript.Run(ctx, b.rdb, []string{key}, token, rebuildLockTTL.Milliseconds()).Err()
		}
	}
}

// Maintenance binds the rebuild and consistency check to their stores, and writes each
// run to the audit trail.
type Maintenance struct {
	Boards *Boards
	Ranks  *Ranks
	Audit  *AuditLog
}

// Rebuild rebuilds a board period's Redis state from PostgreSQL; actor is who asked.
func (m Maintenance) Rebuild(ctx context.Context, actor string, t Target) (RebuildResult, error) {
	res, err := m.Boards.Rebuild(ctx, m.Ranks, t)
	if err != nil {
		return res, err
	}
	return res, m.Audit.Record(ctx, AuditEntry{Actor: actor, Action: "board.rebuild", Target: t.Board + "/" + t.Period,
		Detail: map[string]any{"entries": res.Entries, "version": res.Version, "took_ms": res.Duration.Milliseconds()}})
}

// Mirror is the projector's view of Redis: Boards, with Reload reading from Ranks.
type Mirror struct {
	*Boards
	Ranks *Ranks
}

// Reload loads a board period from PostgreSQL into Redis.
func (m Mirror) Reload(ctx context.Context, t Target) (Top, error) {
	return m.Boards.Reload(ctx, m.Ranks, t)
}

// CurrentTop reads a board period's whole cached top, as Apply returns a changed one.
func (m Mirror) CurrentTop(ctx context.Context, t Target) (Top, error) {
	return m.Boards.Top(ctx, t.Board, t.Period, m.TopN())
}

// Exists reports whether PostgreSQL ever had an entry of a board period (Ranks.Exists).
func (m Mirror) Exists(ctx context.Context, board, period string) (bool, error) {
	return m.Ranks.Exists(ctx, board, period)
}
