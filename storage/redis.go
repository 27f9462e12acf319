package storage

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Redis layout, per board (the braces keep all of a board's keys in one cluster slot) and
// period:
//
//	{prefix}:{board}:{period}:z    sorted set; member: 8 bytes of MaxInt64-reached µs, then the user; score = sort key
//	{prefix}:{board}:{period}:u    hash user -> record (record.go); bucket 0 of the entry hashes
//	{prefix}:{board}:{period}:u:i  bucket i > 0 of the entry hashes (redis_scripts.go), for bigger boards
//	{prefix}:{board}:{period}:n    hash user -> nick name
//	{prefix}:{board}:{period}:m    hash user -> metadata (JSON), for entries that have some
//	{prefix}:{board}:{period}:top  hash version, digest, updated (µs), body: the cached top-N;
//	                               its presence marks the period as loaded
//	{prefix}:{board}:ver           the board's version counter (every period's top versions)
//	{prefix}:{board}:{period}:gone hash user -> version of recent removals (gone~: a rebuild's)
//	{prefix}:{board}:{period}:held hash user -> event ids of admins' adjustments or removals on
//	                               its way (Hold)
//	{prefix}:{board}:{period}:loading  hash token -> pages written, of the loads on demand under way
//	{prefix}:{board}:{period}:renamed  hash user -> nick name applied while a load or a rebuild was under way
//
// Higher sort keys rank first (the value on desc boards, its negation on asc ones). Equal
// sort keys order by member, descending: the entry that reached the value first has the
// larger inverted time and ranks higher.

// ErrNotLoaded is returned when a board period is not in Redis (never loaded, expired, or
// lost): load it from PostgreSQL, or read PostgreSQL.
var ErrNotLoaded = errors.New("board period not loaded in Redis")

// Entry is one ranked entry read from Redis.
type Entry struct {
	Rank      int64
	UserID    string
	Score     int64
	NickName  string
	UpdatedAt time.Time
	Metadata  json.RawMessage
	// Position is where the entry stands (set by page, around and users reads).
	Position Position
	// Version is the entry's version in the mirror (set by Redis's reads; 0 from PostgreSQL).
	Version int64
}

// Top is a board's cached top-N.
type Top struct {
	Version   int64
	UpdatedAt time.Time
	Entries   []Entry
}

// Target names a board period to write, and how long its keys live after the write.
type Target struct {
	Board  string
	Period string
	// TTL is how long Redis keeps the period after this write (0: forever).
	TTL time.Duration
}

// Boards is the Redis side of the leaderboards.
type Boards struct {
	rdb    redis.UniversalClient
	prefix string
	topN   int
	// reads runs the read scripts of Top and User: rdb, or a Pipe (WithPipe).
	reads redis.Scripter
	// tops keeps the tops read last, parsed, by key: a read whose top has not changed
	// since gets its version and time from Redis, not its body.
	tops *topCache
	// names keeps the key names of the board periods used lately (every write and read
	// names one: built each time, they were a tenth of the accept path's allocations).
	names *keyNames
}

// NewBoards returns the Redis store; topN is the size of each board's cached top.
func NewBoards(rdb redis.UniversalClient, prefix string, topN int) *Boards {
	return &Boards{rdb: rdb, prefix: prefix, topN: topN, reads: rdb, tops: newTopCache(), names: &keyNames{}}
}

// WithPipe returns the store with its Top and User reads sent through pipe, in pipelines
// shared with other requests' commands.
func (b *Boards) WithPipe(pipe *Pipe) *Boards {
	c := *b
	c.reads = pipedScripts{UniversalClient: b.rdb, pipe: pipe}
	return &c
}

// TopN is the size of the cached top.
func (b *Boards) TopN() int { return b.topN }

// keys of a board period, by name.
type keys struct {
	z, u, n, m, top, rebuild, zs, us, ns, ms, ver string
	// gone and goneS are the hashes of recent removals (user -> version) of the live keys and
	// of a rebuild's shadow (upsertLua).
	gone, goneS string
	// held is the hash of users with an admin's adjustment or removal on its way (user ->
	// event id; Boards.Hold).
	held string
	// loading is the hash of the loads on demand under way: token -> pages written
	// (loadScript).
	loading string
	// renamed is the hash of nick names applied while a load on demand or a rebuild was
	// under way: user -> nick name (applyScript).
	renamed string
}

func (b *Boards) keys(board, period string) keys {
	return b.names.get(board, period, b.buildKeys)
}

func (b *Boards) buildKeys(board, period string) keys {
	tag := b.prefix + ":{" + board + "}:"
	base := tag + period + ":"
	return keys{z: base + "z", u: base + "u", n: base + "n", m: base + "m", top: base + "top", rebuild: base + "rebuild",
		zs: base + "z~", us: base + "u~", ns: base + "n~", ms: base + "m~", ver: tag + "ver", gone: base + "gone", goneS: base + "gone~", held: base + "held",
		loading: base + "loading", renamed: base + "renamed"}
}

// maxKeyNames bounds keyNames: past it the names are forgotten and built again as used
// (a board of matches has a period per match; a few hundred are live at once).
const maxKeyNames = 4096

// keyNames remembers the key names of board periods.
type keyNames struct {
	mu    sync.RWMutex
	names map[[2]string]keys
}

func (c *keyNames) get(board, period string, build func(board, period string) keys) keys {
	id := [2]string{board, period}
	c.mu.RLock()
	k, ok := c.names[id]
	c.mu.RUnlock()
	if ok {
		return k
	}
	k = build(board, period)
	c.mu.Lock()
	if c.names == nil || len(c.names) >= maxKeyNames {
		c.names = make(map[[2]string]keys)
	}
	c.names[id] = k
	c.mu.Unlock()
	return k
}

// entryArgs appends the script arguments of entry states: user, record, sort key,
// version, nick name, metadata. A hidden or removed entry has no record: the scripts
// delete it.
func entryArgs(args []any, states []EntryState, nicks map[string]string) []any {
	for _, s := range states {
		rec := ""
		if !s.Hidden && !s.Removed {
			rec = entryRecord(s)
		}
		args = append(args, s.UserID, rec, s.SortKey, s.Version, nicks[s.UserID], string(s.Metadata))
	}
	return args
}

// renamedArgs appends applyScript's last arguments: how many users the states rename, then
// each user and its new nick name (the states are of one board period: an entry, and so a
// user, once).
func renamedArgs(args []any, states []EntryState, nicks map[string]string) []any {
	at := len(args)
	args = append(args, 0)
	n := 0
	for _, s := range states {
		if !s.Renamed || nicks[s.UserID] == "" {
			continue
		}
		args = append(args, s.UserID, nicks[s.UserID])
		n++
	}
	args[at] = n
	return args
}

// Apply mirrors the given absolute states of one board period into Redis (older versions
// than what Redis holds are ignored), recomputes the cached top-N when an entry changed
// within it, and reports whether the top changed: then the Top has its entries; otherwise
// only its version and update time. It returns ErrNotLoaded, writing nothing, when the
// period is not loaded.
func (b *Boards) Apply(ctx context.Context, t Target, states []EntryState, nicks map[string]string) (Top, bool, error) {
	r := b.ApplyAll(ctx, []MirrorGroup{{Target: t, States: states}}, nicks)[0]
	return r.Top, r.Changed, r.Err
}

// MirrorGroup is the entry states of one board period that ApplyAll mirrors.
type MirrorGroup struct {
	Target Target
	States []EntryState
}

// MirrorResult is what Apply returns, for one group of ApplyAll.
type MirrorResult struct {
	Top     Top
	Changed bool
	Err     error
}

// ApplyAll is Apply for the board periods of one projector batch at once: their scripts
// go in pipelines of up to applyPipeline (split by node on a cluster), one round trip for
// many of them. Each group gets its own result; a script Redis has lost is run again on
// its own (NOSCRIPT: it did not run).
func (b *Boards) ApplyAll(ctx context.Context, groups []MirrorGroup, nicks map[string]string) []MirrorResult {
	type call struct {
		keys []string
		args []any
		cmd  *redis.Cmd
	}
	calls := make([]call, len(groups))
	now := time.Now().UnixMicro()
	for i, g := range groups {
		k := b.keys(g.Target.Board, g.Target.Period)
		args := make([]any, 0, 5+6*len(g.States))
		args = append(args, b.topN, now, g.Target.TTL.Milliseconds(), len(g.States))
		args = renamedArgs(entryArgs(args, g.States, nicks), g.States, nicks)
		calls[i] = call{keys: []string{k.z, k.u, k.n, k.m, k.top, k.rebuild, k.zs, k.us, k.ns, k.ms, k.ver, k.gone, k.goneS, k.loading, k.renamed}, args: args}
	}
	// Each pipeline answers within the client's read timeout, like one call did; each call
	// keeps its own answer or error, whatever Pipelined returns.
	for from := 0; from < len(calls); from += applyPipeline {
		part := calls[from:min(from+applyPipeline, len(calls))]
		_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range part {
				part[i].cmd = applyScript.EvalSha(ctx, p, part[i].keys, part[i].args...)
			}
			return nil
		})
	}
	out := make([]MirrorResult, len(groups))
	for i, c := range calls {
		res, err := c.cmd.Slice()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			res, err = applyScript.Eval(ctx, b.rdb, c.keys, c.args...).Slice()
		}
		out[i] = applyResult(res, err)
	}
	return out
}

// applyPipeline bounds the scripts of one ApplyAll pipeline, whose answers come within one
// read timeout (300 ms by default): 64 scripts of small boards take about 20 ms here.
const applyPipeline = 64

// applyResult reads applyScript's answer.
func applyResult(res []any, err error) MirrorResult {
	if err != nil {
		return MirrorResult{Err: redisErr("apply entries", err)}
	}
	if res[0].(int64) == -2 {
		return MirrorResult{Err: ErrNotLoaded}
	}
	top, err := parseTop(res[1], res[2], res[3])
	if err != nil {
		return MirrorResult{Err: err}
	}
	return MirrorResult{Top: top, Changed: res[0].(int64) == 1}
}

// Load writes a whole board period into Redis from states (all of its entries, read from
// PostgreSQL, in pages through next) and marks it loaded with a new top version.
// Entries written meanwhile by the projector win by version.
func (b *Boards) Load(ctx context.Context, t Target, next func() ([]EntryState, map[string]string, error)) (Top, error) {
	return b.load(ctx, t, next, 0)
}

// load is Load for about expected entries (0: unknown), which lets empty entry hashes start
// with the buckets they need. Each page and the seal go on only while Redis counts every
// page of the load before them (loadScript): Redis losing its data midway (a restart, a
// flush) or coming back with an older copy loses the count with the pages, and the load
// fails (ErrUnavailable) instead of marking loaded a board without them; the next read or
// write loads it again. Loads of one period by several processes do not stop each other.
func (b *Boards) load(ctx context.Context, t Target, next func() ([]EntryState, map[string]string, error), expected int64) (Top, error) {
	k := b.keys(t.Board, t.Period)
	token := uuid.NewString()
	if err := beginLoadScript.Run(ctx, b.rdb, []string{k.loading, k.renamed, k.rebuild}, token).Err(); err != nil {
		return Top{}, redisErr("load: begin", err)
	}
	pages, err := b.loadPages(ctx, []string{k.z, k.u, k.n, k.m, k.gone, k.top, k.ver, k.loading, k.renamed}, next, expected, t.TTL, token)
	if err != nil {
		b.endLoad(ctx, k, token)
		return Top{}, err
	}
	res, err := sealScript.Run(ctx, b.rdb, []string{k.z, k.u, k.n, k.m, k.top, k.ver, k.loading, k.renamed, k.rebuild}, b.topN, time.Now().UnixMicro(), t.TTL.Milliseconds(), token, pages).Slice()
	if err != nil {
		b.endLoad(ctx, k, token)
		return Top{}, redisErr("load: seal", err)
	}
	if res[0].(int64) == -1 {
		b.endLoad(ctx, k, token)
		return Top{}, redisErr("load: seal", errLoadLost)
	}
	return parseTop(res[1], res[2], res[3])
}

// endLoad takes a failed load out of the loads under way (endLoadScript), with a second
// of its own: the load's context may be what ended it. Redis unavailable, the token
// expires with the hash.
func (b *Boards) endLoad(ctx context.Context, k keys, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = endLoadScript.Run(ctx, b.rdb, []string{k.loading, k.renamed, k.rebuild}, token).Err()
}

// errLoadLost is a load on demand some of whose pages Redis lost midway.
var errLoadLost = errors.New("pages of the load were lost from Redis (a restart, a flush, an older copy of its data)")

// loadPages writes every page next returns into the given keys (z, u, n, m, their
// removals' hash, and for a load on demand their top, version counter and hash of loads
// under way: loadScript); expected is about how many entries they bring (0: unknown). A
// ttl (not 0) gives the keys left a new lifetime before the first page is written. A
// token (a load on demand's) has Redis count the pages, each checking the count. It
// returns how many pages it wrote.
func (b *Boards) loadPages(ctx context.Context, dst []string, next func() ([]EntryState, map[string]string, error), expected int64, ttl time.Duration, token string) (int, error) {
	for pages := 0; ; pages++ {
		first := pages == 0
		states, nicks, err := next()
		if err != nil {
			return pages, err
		}
		if len(states) == 0 {
			return pages, nil
		}
		args := make([]any, 0, 6+6*len(states))
		pageTTL := int64(0)
		if first {
			pageTTL = ttl.Milliseconds()
		}
		args = append(args, len(states), expected, pageTTL, time.Now().UnixMicro(), token, pages)
		n, err := loadScript.Run(ctx, b.rdb, dst, entryArgs(args, states, nicks)...).Int64()
		if err != nil {
			return pages, redisErr("load entries", err)
		}
		if n < 0 {
			return pages, redisErr("load entries", errLoadLost)
		}
	}
}

// Top returns the cached top of a board period, limited to limit entries, or
// ErrNotLoaded. The top is parsed once per version: Redis sends its body only when it is
// not the one read last.
func (b *Boards) Top(ctx context.Context, board, period string, limit int) (Top, error) {
	k := b.keys(board, period).top
	known, cached := b.tops.get(k)
	res, err := topReadScript.Run(ctx, b.reads, []string{k}, known.version, known.updated).Slice()
	if errors.Is(err, redis.Nil) {
		return Top{}, ErrNotLoaded
	}
	if err != nil {
		return Top{}, redisErr("read top", err)
	}
	var top Top
	if len(res) == 2 && cached {
		top = known.top
	} else {
		if len(res) != 3 {
			return Top{}, fmt.Errorf("read top: %d fields", len(res))
		}
		if top, err = parseTop(res[0], res[1], res[2]); err != nil {
			return Top{}, err
		}
		b.tops.put(k, cachedTop{version: fmt.Sprint(res[0]), updated: fmt.Sprint(res[1]), top: top})
	}
	if limit >= 0 && len(top.Entries) > limit {
		top.Entries = top.Entries[:limit:limit]
	}
	return top, nil
}

// topCacheSize bounds the tops kept parsed (one per board period read; emptied when full).
const topCacheSize = 4096

// topCache holds parsed tops by key; their entries are shared and never changed.
type topCache struct {
	mu sync.RWMutex
	m  map[string]cachedTop
}

// cachedTop is a top as parsed, with the version and time (as Redis spells them) it had.
type cachedTop struct {
	version, updated string
	top              Top
}

func newTopCache() *topCache { return &topCache{m: map[string]cachedTop{}} }

func (c *topCache) get(key string) (cachedTop, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.m[key]
	return t, ok
}

func (c *topCache) put(key string, t cachedTop) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= topCacheSize {
		clear(c.m)
	}
	c.m[key] = t
}

// User returns a user's entry with its 1-based rank, ErrNotFound, or ErrNotLoaded.
func (b *Boards) User(ctx context.Context, board, period, userID string) (Entry, error) {
	k := b.keys(board, period)
	res, err := userScript.Run(ctx, b.reads, []string{k.z, k.u, k.m, k.top}, userID).Result()
	if errors.Is(err, redis.Nil) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, redisErr("read user", err)
	}
	fields, ok := res.([]any)
	if !ok {
		return Entry{}, ErrNotLoaded
	}
	if len(fields) != 4 {
		return Entry{}, fmt.Errorf("read user: %d fields", len(fields))
	}
	sortKey, err := parseSortKey(fields[3])
	if err != nil {
		return Entry{}, fmt.Errorf("read user: %w", err)
	}
	rec, _ := fields[0].(string)
	st, err := decodeRecord(userID, rec, sortKey)
	if err != nil {
		return Entry{}, fmt.Errorf("read user: %w", err)
	}
	e := Entry{Rank: fields[1].(int64) + 1, UserID: userID, Score: st.score, UpdatedAt: st.updated, Version: st.version}
	if meta, _ := fields[2].(string); meta != "" {
		e.Metadata = json.RawMessage(meta)
	}
	return e, nil
}

// Ping checks that Redis answers, and a Redis Cluster that it serves every slot: its nodes
// answer PING while the cluster is down.
func (b *Boards) Ping(ctx context.Context) error {
	if err := b.rdb.Ping(ctx).Err(); err != nil {
		return redisErr("ping", err)
	}
	if cc, ok := b.rdb.(*redis.ClusterClient); ok {
		info, err := cc.ClusterInfo(ctx).Result()
		if err != nil {
			return redisErr("cluster info", err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("cluster info: %w: the cluster is not serving every slot", ErrUnavailable)
		}
	}
	return nil
}

func parseTop(version, updated, body any) (Top, error) {
	v, err1 := strconv.ParseInt(fmt.Sprint(version), 10, 64)
	u, err2 := strconv.ParseInt(fmt.Sprint(updated), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Top{}, fmt.Errorf("parse top: %w", err)
	}
	top := Top{Version: v, UpdatedAt: time.UnixMicro(u).UTC()}
	s, _ := body.(string)
	if s == "" {
		return top, nil
	}
	for i, line := range strings.Split(s, "\n") {
		f := strings.SplitN(line, "\t", 5)
		if len(f) != 5 {
			return Top{}, fmt.Errorf("parse top: malformed line %q", line)
		}
		sortKey, err1 := strconv.ParseFloat(f[1], 64)
		rec, err2 := hex.DecodeString(f[2])
		if err := errors.Join(err1, err2); err != nil {
			return Top{}, fmt.Errorf("parse top: %w", err)
		}
		st, err := decodeRecord(f[0], string(rec), sortKey)
		if err != nil {
			return Top{}, fmt.Errorf("parse top: %w", err)
		}
		e := Entry{Rank: int64(i + 1), UserID: f[0], Score: st.score, UpdatedAt: st.updated, NickName: f[3]}
		if f[4] != "" {
			e.Metadata = json.RawMessage(f[4])
		}
		top.Entries = append(top.Entries, e)
	}
	return top, nil
}

// unavailableReplies are the error replies of a Redis that cannot serve the command now
// (starting, blocked by a script, a cluster missing a master or failing over, a replica
// answering writes, a Redis refusing writes: full at maxmemory under noeviction, or its
// snapshots failing), as against a script's own error. Reads that write (a page after a
// cursor marks it, a lost period is loaded) then fall back to PostgreSQL as reads of a
// Redis down do (they answered 503 while the other reads answered from Redis; found by a
// review).
var unavailableReplies = []string{"LOADING", "BUSY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "READONLY", "NOREPLICAS", "OOM", "MISCONF"}

// redisErr marks every Redis failure but a script's own error as unavailability.
func redisErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !slices.ContainsFunc(unavailableReplies, func(p string) bool { return strings.HasPrefix(rerr.Error(), p) }) {
		return fmt.Errorf("%s: %w", op, err)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
}

// ValueKey names one entry: a user on a board period.
type ValueKey struct{ Board, Period, UserID string }

// Value is an entry's value as Redis holds it; OK is false when it holds none (no entry,
// or the period is not loaded).
type Value struct {
	Score int64
	OK    bool
}

// ValueReader reads single entries' values through a Pipe (the write path asks for one
// per write: is the value already there?).
type ValueReader struct {
	boards *Boards
	pipe   *Pipe
}

// NewValueReader reads b's values through pipe.
func NewValueReader(b *Boards, pipe *Pipe) *ValueReader {
	return &ValueReader{boards: b, pipe: pipe}
}

// Read queues the read of one entry's value and returns at once; Wait gets it. A user with
// an admin's adjustment or removal on its way (Hold) reads as having no value: what Redis
// shows of the entry may be about to go.
func (v *ValueReader) Read(ctx context.Context, k ValueKey) ValueRead {
	keys := v.boards.keys(k.Board, k.Period)
	r := ValueRead{boards: v.boards, key: k, z: keys.z, u: keys.u, held: keys.held}
	r.cmd = redis.NewCmd(ctx, "evalsha", recordsScript.Hash(), 3, keys.z, keys.u, keys.held, k.UserID)
	r.done = v.pipe.Go(ctx, r.cmd)
	return r
}

// coalesceValueReads replaces the value reads (ValueReader's) of one board period among
// cmds with one script call that reads them all: a script call costs Redis far more than
// the reads inside it. spread, called once the calls have answered, gives each read its
// own part of the answer (or the call's error). Without two reads of one board period it
// returns cmds as they are.
func coalesceValueReads(ctx context.Context, cmds []redis.Cmder) (send []redis.Cmder, spread func()) {
	type group struct {
		merged *redis.Cmd
		reads  []*redis.Cmd
	}
	groups := map[[3]any]*group{}
	var order [][3]any
	reads := 0
	send = make([]redis.Cmder, 0, len(cmds))
	for _, c := range cmds {
		k, ok := valueReadKeys(c)
		if !ok {
			send = append(send, c)
			continue
		}
		g := groups[k]
		if g == nil {
			g = &group{}
			groups[k] = g
			order = append(order, k)
		}
		g.reads = append(g.reads, c.(*redis.Cmd))
		reads++
	}
	if reads == len(order) { // no two reads of one board period
		return cmds, func() {}
	}
	for _, k := range order {
		g := groups[k]
		args := []any{"evalsha", recordsScript.Hash(), 3, k[0], k[1], k[2]}
		for _, r := range g.reads {
			args = append(args, r.Args()[6])
		}
		g.merged = redis.NewCmd(ctx, args...)
		send = append(send, g.merged)
	}
	return send, func() {
		for _, k := range order {
			g := groups[k]
			res, err := g.merged.Slice()
			if err == nil && len(res) != 2*len(g.reads) {
				err = fmt.Errorf("read values: %d fields for %d users", len(res), len(g.reads))
			}
			for i, r := range g.reads {
				if err != nil {
					r.SetErr(err)
				} else {
					r.SetVal([]any{res[2*i], res[2*i+1]})
				}
			}
		}
	}
}

// valueReadKeys says whether c is a ValueReader's read, and of which board period.
func valueReadKeys(c redis.Cmder) ([3]any, bool) {
	cmd, ok := c.(*redis.Cmd)
	if !ok {
		return [3]any{}, false
	}
	a := cmd.Args()
	if len(a) != 7 || a[0] != "evalsha" || a[1] != recordsScript.Hash() || a[2] != 3 {
		return [3]any{}, false
	}
	return [3]any{a[3], a[4], a[5]}, true
}

// ValueRead is a value on its way from Redis.
type ValueRead struct {
	boards     *Boards
	key        ValueKey
	z, u, held string
	cmd        *redis.Cmd
	done       Pending[struct{}]
}

// Wait waits for the value (once).
func (r ValueRead) Wait(ctx context.Context) (Value, error) {
	if _, err := r.done.Wait(ctx); err != nil {
		return Value{}, redisErr("read value", err)
	}
	res, err := r.cmd.Slice()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Redis lost its scripts (a restart, SCRIPT FLUSH): EVAL loads it again.
		res, err = recordsScript.Run(ctx, r.boards.rdb, []string{r.z, r.u, r.held}, r.key.UserID).Slice()
	}
	if err != nil {
		return Value{}, redisErr("read value", err)
	}
	vals, err := decodeRecords([]string{r.key.UserID}, res)
	if err != nil || vals[0] == nil {
		return Value{}, err
	}
	return Value{Score: vals[0].score, OK: true}, nil
}

// decodeRecords reads recordsScript's answer for users: nil for those without an entry (or
// whose sorted-set member is missing: CheckConsistency looks at that).
func decodeRecords(users []string, res []any) ([]*storedEntry, error) {
	if len(res) != 2*len(users) {
		return nil, fmt.Errorf("read records: %d fields for %d users", len(res), len(users))
	}
	out := make([]*storedEntry, len(users))
	for i, user := range users {
		rec, _ := res[2*i].(string)
		if rec == "" || res[2*i+1] == "" {
			continue
		}
		sortKey, err := parseSortKey(res[2*i+1])
		if err != nil {
			return nil, fmt.Errorf("read records: %s: %w", user, err)
		}
		st, err := decodeRecord(user, rec, sortKey)
		if err != nil {
			return nil, err
		}
		out[i] = &st
	}
	return out, nil
}

// heldTTL is how long a hold lasts at most: its command is normally applied, and the hold
// released, within the pipeline's latency; one dead-lettered or retried as a duplicate
// leaves it until then, which only sends that user's writes through the pipeline.
const heldTTL = 24 * time.Hour

// A user's hold is the set of event ids of the admin commands on their way to its entry,
// one field of the held hash (user -> event ids, one a line: event ids are printable, and
// may hold spaces, never a newline): held while the set is not empty. Each command takes its own id out (Unhold),
// when applied or when it was not accepted after all; a single slot, which the newest
// command took over, was given back wrong when an older command was applied meanwhile.
const holdSetLua = `
local function without(cur, id)
  local ids, found = {}, false
  if cur then
    for x in string.gmatch(cur, '[^\n]+') do
      if x == id then found = true else ids[#ids + 1] = x end
    end
  end
  return ids, found
end
`

// holdScript adds an event id to a user's hold (KEYS[1]: held; ARGV: user, event id,
// lifetime ms) and returns 1 if it was not in it.
var holdScript = redis.NewScript(holdSetLua + `
local ids, found = without(redis.call('HGET', KEYS[1], ARGV[1]), ARGV[2])
ids[#ids + 1] = ARGV[2]
redis.call('HSET', KEYS[1], ARGV[1], table.concat(ids, '\n'))
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
if found then return 0 end
return 1
`)

// unholdScript takes an event id out of a user's hold (KEYS[1]: held; ARGV: user, event id).
var unholdScript = redis.NewScript(holdSetLua + `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
local ids = without(cur, ARGV[2])
if #ids == 0 then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], table.concat(ids, '\n')) end
return 0
`)

// Hold marks a user's entry on a board period as about to change by an admin's command
// (an adjustment or a removal, eventID), before the command is made durable: until the
// projector mirrored it (Unhold), the write path's value reads (ValueReader) find no entry
// for the user, so a best score is not answered "unchanged" against an entry the command
// removes or lowers, and goes through the pipeline, after the command. It reports whether
// the command's id was not holding the user yet: a command that turns out not accepted
// now (a reused event id, a retry) takes it out again only then, as one accepted before
// and still on its way keeps holding.
func (b *Boards) Hold(ctx context.Context, board, period, userID, eventID string) (added bool, err error) {
	n, err := holdScript.Run(ctx, b.rdb, []string{b.keys(board, period).held}, userID, eventID, heldTTL.Milliseconds()).Int()
	return n == 1, redisErr("hold entry", err)
}

// Unhold takes the event id out of the user's hold (other commands' stay).
func (b *Boards) Unhold(ctx context.Context, board, period, userID, eventID string) error {
	err := unholdScript.Run(ctx, b.rdb, []string{b.keys(board, period).held}, userID, eventID).Err()
	return redisErr("unhold entry", err)
}
