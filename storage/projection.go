package storage

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Ops of a score event other than the board's operator.
const (
	// OpAdjust sets the entry's value, whatever the board's operator (an admin's fix).
	OpAdjust = "adjust"
	// OpRemove deletes the entry.
	OpRemove = "remove"
	// OpSync names a user whose entries changed outside the pipeline (a ban or an unban):
	// the mirror gets the state of all their entries (the history records it without a
	// board, so the relay knows it was applied).
	OpSync = "sync"
)

// ScoreEvent is one command to apply to a board entry.
type ScoreEvent struct {
	// Op is "" (the board's operator), OpAdjust, OpRemove or OpSync.
	Op         string
	EventID    string
	Board      string
	Period     string
	Operator   string // recorded in the history
	UserID     string
	NickName   string
	Value      int64
	OccurredAt time.Time
	// Metadata is the event's JSON object (nil for none).
	Metadata []byte
	// Requeued: the command comes from a dead letter an admin requeued (it carries
	// MetaAttempts): it may be older than the entry's last change (handlers.FoldWith).
	Requeued bool
	// Outbox is the outbox row the event's command was forwarded from (zero: unknown). Apply
	// deletes it with the transaction that applies the event (see Projection.WithOutbox).
	Outbox OutboxRow
}

// EntryKey names one entry: a user on a board and period.
type EntryKey struct{ Board, Period, UserID string }

// Key is the entry an event applies to.
func (e ScoreEvent) Key() EntryKey { return EntryKey{e.Board, e.Period, e.UserID} }

// EntryState is the absolute state of one board entry.
type EntryState struct {
	Board  string
	Period string
	UserID string
	Score  int64
	// SortKey ranks entries: higher first (the board's rules decide it from Score).
	SortKey   int64
	Version   int64
	ReachedAt time.Time
	UpdatedAt time.Time
	// Metadata is the JSON object of the event that last changed the entry (nil: none).
	Metadata []byte
	// Hidden entries belong to a banned user: kept, but left out of every read.
	Hidden bool
	// Removed is an entry an admin removed: it no longer exists.
	Removed bool
	// NameOnly is an entry the batch names only for its user's new nick name (it did not
	// change): a mirror that does not hold its period has nothing to correct there, and
	// need not load it (a player of many matches would load every one of them).
	NameOnly bool
	// SyncOnly is an entry the batch names only because its user was banned or unbanned
	// (a sync): as for NameOnly, a mirror that does not hold its period need not load it
	// (a load reads the entry as PostgreSQL now holds it); a ban of a player of many
	// matches loaded every one of them.
	SyncOnly bool
	// Renamed is an entry of a user whose nick name the batch changed (or found changed
	// since a command delivered again was applied): the Redis mirror notes the name for a
	// load on demand under way, which may have read the old one.
	Renamed bool
}

// Key is the entry the state belongs to.
func (s EntryState) Key() EntryKey { return EntryKey{s.Board, s.Period, s.UserID} }

// FoldFunc decides what new events do to their entries: given the current state of every
// entry they name (absent when the user has none yet) and the events in batch order, it
// returns the new states of the entries that changed. Versions are set by the store.
type FoldFunc func(current map[EntryKey]EntryState, events []ScoreEvent) ([]EntryState, error)

// AppliedBatch is what PostgreSQL holds for the entries a batch touched.
type AppliedBatch struct {
	// Entries has the current state of every entry an event of the batch names, new or
	// redelivered, so the Redis mirror can always be repaired from it.
	Entries []EntryState
	// NewEvents counts events applied for the first time (the others were redeliveries).
	NewEvents int
	// Fresh marks, by index into the batch, the events applied for the first time.
	Fresh []bool
	// NickNames maps users of the batch to the display name their events carried.
	NickNames map[string]string
	// Changed lists, per "board:period", the users whose entry this batch changed.
	Changed map[string][]string
}

// Projection applies score events to the board tables, idempotently by (user, event id).
type Projection struct {
	pool *pgxpool.Pool
	// outboxShards, when not 0, is how many outbox shards there are: Apply deletes the
	// outbox rows of those shards its events name.
	outboxShards int
}

// NewProjection returns the PostgreSQL side of the projector.
func NewProjection(pool *pgxpool.Pool) *Projection { return &Projection{pool: pool} }

// WithOutbox makes Apply delete, in the transaction that applies them, the outbox rows its
// events were forwarded from (ScoreEvent.Outbox), of shards 0 to shards-1, and returns p.
// A row goes only if its uuid is the event's id, so a row named wrongly stays. The prune
// deletes the rest (rows of requeued dead letters, of messages forwarded without a row's
// name, of events that were dead-lettered) after it checked, row by row, that their event
// was applied: about 12 µs of PostgreSQL time per row at saturation, against a primary key
// lookup here.
func (p *Projection) WithOutbox(shards int) *Projection {
	p.outboxShards = shards
	return p
}

// Apply records the events in the history (skipping those already there), lets fold
// decide the new states of the entries the new ones name, writes them, and returns the
// state of every entry the batch names. It is one transaction in three round trips to
// PostgreSQL: BEGIN, the locks of the entries the batch names, the history's insert and
// their current state; then the new states (the upsert returns the rows it wrote, so the
// entries named need no second read), the nick names and every entry of a synced user;
// then COMMIT. (Five round trips, as it was with a BEGIN of its own and the locks
// taken in a trip of their own after the history's insert, cost the service and
// PostgreSQL a write and a read each.)
func (p *Projection) Apply(ctx context.Context, events []ScoreEvent, fold FoldFunc) (AppliedBatch, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return AppliedBatch{}, unavailable("apply score batch", err)
	}
	defer conn.Release()
	c := conn.Conn()
	out, err := apply(ctx, c, events, fold, p.outboxShards)
	if err != nil {
		if c.PgConn().TxStatus() != 'I' {
			// End the transaction before the connection goes back to the pool (pgxpool
			// would destroy it); one that cannot roll back is closed, which ends it too.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if _, rerr := c.Exec(rctx, "ROLLBACK"); rerr != nil {
				_ = c.Close(rctx)
			}
		}
		return AppliedBatch{}, unavailable("apply score batch", err)
	}
	return out, nil
}

func apply(ctx context.Context, c *pgx.Conn, events []ScoreEvent, fold FoldFunc, outboxShards int) (AppliedBatch, error) {
	var (
		out     AppliedBatch
		synced  []string
		named   []EntryKey
		seen    = map[EntryKey]bool{}
		current = map[EntryKey]EntryState{}
		gone    = map[EntryKey]int64{} // removed entries' versions (removed_entries)
		fresh   map[historyKey]bool
	)
	out.NickNames = map[string]string{}
	for _, e := range events {
		if e.Op == OpSync { // every entry of a synced user is named (read at the end)
			synced = append(synced, e.UserID)
			continue
		}
		if k := e.Key(); !seen[k] {
			seen[k] = true
			named = append(named, k)
		}
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if len(named) > 0 {
		queueLockEntries(b, named)
	}
	// Syncs are recorded too (without board or period), so the relay sees them applied.
	queueRecordHistory(b, firstCommands(events), func(f map[historyKey]bool) { fresh = f })
	if len(named) > 0 {
		queueReadEntries(b, named, current)
		queueReadRemoved(b, named, gone)
	}
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		return AppliedBatch{}, err
	}
	out.Fresh = make([]bool, len(events))
	var newEvents []ScoreEvent
	for i, e := range events {
		if e.Op == OpSync {
			out.Fresh[i] = true // nothing to repeat: a sync is applied every time
			continue
		}
		hk := historyKey{e.UserID, e.EventID, e.Board, e.Period}
		if !fresh[hk] {
			continue
		}
		delete(fresh, hk) // an event id twice in one batch counts once
		out.Fresh[i] = true
		newEvents = append(newEvents, e)
		// Only a command applied now names its user: one delivered again (after a
		// rebalance, its user's later commands applied meanwhile) would put back an older
		// name.
		if e.NickName != "" {
			out.NickNames[e.UserID] = e.NickName
		}
	}
	out.NewEvents = len(newEvents)
	out.Changed = map[string][]string{}
	b = &pgx.Batch{}
	var removed []EntryState
	var unnamed []string // users of entries created now by commands that named nobody
	if len(newEvents) > 0 {
		states, err := fold(current, newEvents)
		if err != nil {
			return AppliedBatch{}, err
		}
		for i := range states {
			// Versions keep rising across a removal: an entry created again starts above
			// the removed one (which Redis may still hold).
			k := states[i].Key()
			if cur, ok := current[k]; ok {
				states[i].Version = cur.Version + 1
			} else {
				states[i].Version = gone[k] + 1
			}
			out.Changed[states[i].Board+":"+states[i].Period] = append(out.Changed[states[i].Board+":"+states[i].Period], states[i].UserID)
			if states[i].Removed {
				removed = append(removed, states[i])
			} else if _, ok := current[k]; !ok && out.NickNames[states[i].UserID] == "" && !slices.Contains(unnamed, states[i].UserID) {
				unnamed = append(unnamed, states[i].UserID)
			}
		}
		queueWriteEntries(b, states, current)
	}
	renamedEntries := queueNickNames(b, out.NickNames)
	// A user named only by commands delivered again gets the name PostgreSQL holds, for
	// the mirror (its Redis step may be what failed the first time); and if that name
	// changed since such a command was applied (its first attempt may have renamed them:
	// in the same transaction, at the same now()), on every entry of theirs, as after a
	// rename. Not on every redelivery: a rewind's backlog of applied commands would mirror
	// all of its users' entries. Both times are PostgreSQL's: the API's clock may be off.
	var again, againEvents, againUsers []string
	for i, e := range events {
		if !out.Fresh[i] && e.NickName != "" && out.NickNames[e.UserID] == "" {
			if !slices.Contains(again, e.UserID) {
				again = append(again, e.UserID)
			}
			againUsers, againEvents = append(againUsers, e.UserID), append(againEvents, e.EventID)
		}
	}
	// A new entry made by a command that names nobody (a game server's write) shows the
	// name the user has, in Redis as in PostgreSQL's reads; so do the entries of such a
	// command delivered again (its first attempt's Redis step may be what failed, and the
	// entry new to Redis) and those of a synced user (an unban writes them to Redis anew).
	lookup := slices.Clone(again)
	for i, e := range events {
		if out.NickNames[e.UserID] == "" && (e.Op == OpSync || (!out.Fresh[i] && e.NickName == "")) {
			unnamed = append(unnamed, e.UserID)
		}
	}
	for _, u := range unnamed {
		if !slices.Contains(lookup, u) {
			lookup = append(lookup, u)
		}
	}
	known := map[string]string{}
	if len(lookup) > 0 {
		b.Queue(`SELECT user_id, nick_name FROM users WHERE user_id = ANY($1) AND nick_name IS NOT NULL`, lookup).Query(func(rows pgx.Rows) error {
			var u, n string
			_, err := pgx.ForEachRow(rows, []any{&u, &n}, func() error {
				known[u] = n
				return nil
			})
			return err
		})
	}
	var againEntries *[]EntryState
	if len(again) > 0 {
		againEntries = queueEntries(b, `SELECT `+entryColumns+` FROM board_entries e
			JOIN (SELECT k.u, min(h.applied_at) AS at FROM unnest($1::text[], $2::text[]) AS k(u, ev)
			      JOIN score_history h ON h.user_id = k.u AND h.event_id = k.ev GROUP BY k.u) a ON e.user_id = a.u
			JOIN users n ON n.user_id = a.u AND n.updated_at >= a.at
			ORDER BY 1, 2, 3`, againUsers, againEvents)
	}
	queueDeleteForwarded(b, events, outboxShards)
	var syncedEntries *[]EntryState
	if len(synced) > 0 {
		syncedEntries = queueLoadSynced(b, synced)
	}
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		return AppliedBatch{}, err
	}
	maps.Copy(out.NickNames, known)
	// An entry the batch names that is gone, removed before (a redelivered removal whose
	// mirror failed, say), is mirrored as removed again: Redis deletes what it may still
	// hold of it, and nothing newer.
	for _, k := range named {
		if _, ok := current[k]; !ok {
			if v, ok := gone[k]; ok {
				removed = append(removed, EntryState{Board: k.Board, Period: k.Period, UserID: k.UserID, Version: v, Removed: true})
			}
		}
	}
	// COMMIT only once every answer is read: queued in the batch, it would run even when
	// reading an answer failed here, and the retry would find the batch applied without
	// knowing which of its events were new.
	if _, err := c.Exec(ctx, "COMMIT"); err != nil {
		return AppliedBatch{}, err
	}
	if syncedEntries != nil {
		for i := range *syncedEntries {
			(*syncedEntries)[i].SyncOnly = true
		}
	}
	var renamed map[string]bool
	for _, o := range []*[]EntryState{renamedEntries, againEntries} {
		if o != nil {
			for i := range *o {
				(*o)[i].NameOnly = true
				if renamed == nil {
					renamed = map[string]bool{}
				}
				renamed[(*o)[i].UserID] = true
			}
		}
	}
	out.Entries = namedEntries(named, current, removed, syncedEntries, renamedEntries, againEntries)
	if renamed != nil {
		for i := range out.Entries {
			out.Entries[i].Renamed = renamed[out.Entries[i].UserID]
		}
	}
	return out, nil
}

// namedEntries is the state the transaction left of every entry the batch names, in the
// order first named: current holds what it read under the entries' locks, updated by the
// rows the write returned; a removed entry is gone from the table and goes last with its
// removal (the Redis mirror deletes it). Entries of synced and renamed users follow (read
// after the batch's writes), each entry once.
func namedEntries(named []EntryKey, current map[EntryKey]EntryState, removed []EntryState, others ...*[]EntryState) []EntryState {
	out := make([]EntryState, 0, len(named)+len(removed))
	seen := make(map[EntryKey]bool, len(named))
	gone := make(map[EntryKey]bool, len(removed))
	for _, r := range removed {
		gone[r.Key()] = true
	}
	for _, k := range named {
		seen[k] = true
		if s, ok := current[k]; ok && !gone[k] {
			out = append(out, s)
		}
	}
	for _, o := range others {
		if o == nil {
			continue
		}
		for _, s := range *o {
			if !seen[s.Key()] && !gone[s.Key()] {
				seen[s.Key()] = true
				out = append(out, s)
			}
		}
	}
	return append(out, removed...)
}

type historyKey struct{ user, id, board, period string }

// firstCommands leaves out the events of a command that reuses a user's event id of an
// earlier command of the batch (a retry sent after the event id left the request log,
// behind the command it repeats: accepted later, so another time): the history's check
// reads the history as it was before the batch. One command's events (a match point's
// three boards) share their time.
func firstCommands(events []ScoreEvent) []ScoreEvent {
	type userEvent struct{ user, id string }
	first := make(map[userEvent]time.Time, len(events))
	var out []ScoreEvent // nil while no event is left out
	for i, e := range events {
		k := userEvent{e.UserID, e.EventID}
		t, seen := first[k]
		if !seen {
			first[k] = e.OccurredAt
		}
		switch {
		case seen && !t.Equal(e.OccurredAt):
			if out == nil {
				out = append(make([]ScoreEvent, 0, len(events)), events[:i]...)
			}
		case out != nil:
			out = append(out, e)
		}
	}
	if out == nil {
		return events
	}
	return out
}

// queueRecordHistory queues the insert of the events into score_history; done gets the
// events that were not there yet. An event is there when the history holds its user's
// event id on any board period: one command's rows (a match point's three) go in
// together, so only a command seen before finds one, also when its board period differs,
// as a retry's does once its event id left the request log (the API decides the period at
// acceptance: a daily board's retry comes for a later day).
func queueRecordHistory(b *pgx.Batch, events []ScoreEvent, done func(fresh map[historyKey]bool)) {
	n := len(events)
	ids, boards, periods, ops, users := make(pgTexts, n), make(pgTexts, n), make(pgTexts, n), make(pgTexts, n), make(pgTexts, n)
	values, times, metas := make(pgInt64s, n), make(pgTimes, n), make([]*string, n)
	for i, e := range events {
		ids[i], boards[i], periods[i], ops[i], users[i], values[i], times[i] = e.EventID, e.Board, e.Period, e.Operator, e.UserID, e.Value, e.OccurredAt
		metas[i] = jsonText(e.Metadata)
	}
	b.Queue(`
		INSERT INTO score_history (event_id, board_id, period, operator, user_id, value, occurred_at, metadata)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::timestamptz[], $8::jsonb[])
			AS k(event_id, board_id, period, operator, user_id, value, occurred_at, metadata)
		WHERE NOT EXISTS (SELECT 1 FROM score_history h WHERE h.user_id = k.user_id AND h.event_id = k.event_id)
		ON CONFLICT (user_id, event_id, board_id, period) DO NOTHING
		RETURNING user_id, event_id, board_id, period`, ids, boards, periods, ops, users, values, times, metas).Query(func(rows pgx.Rows) error {
		fresh := map[historyKey]bool{}
		var k historyKey
		_, err := pgx.ForEachRow(rows, []any{&k.user, &k.id, &k.board, &k.period}, func() error {
			fresh[k] = true
			return nil
		})
		done(fresh)
		return err
	})
}

// userLock is the advisory lock key of a user's entries as a whole: the projector holds it
// shared while it writes some of them, a ban or unban exclusively while it hides or shows
// all of them (so a new entry of a user being banned is hidden too).
const userLock = `hashtextextended('user:' || u, 0)`

// queueLockEntries queues a shared advisory lock on each user (userLock), then a
// transaction-scoped advisory lock on each entry. Locks by key (not row locks) also
// serialize two batches that create the same entry, which a row lock cannot: the row does
// not exist yet. Locks are taken users first, each kind in hash order, and before any
// row is written, so concurrent batches never deadlock: two that insert the same history
// row name the same entry, and the second waits for the first's lock, not its row.
func queueLockEntries(b *pgx.Batch, keys []EntryKey) {
	boards, periods, users := splitKeys(keys)
	b.Queue(`
		SELECT pg_advisory_xact_lock_shared(h) FROM (
			SELECT DISTINCT `+userLock+` AS h FROM unnest($1::text[]) AS k(u)) l
		ORDER BY h`, users)
	b.Queue(`
		SELECT pg_advisory_xact_lock(h) FROM (
			SELECT DISTINCT hashtextextended(k.b || ':' || k.p || ':' || k.u, 0) AS h
			FROM unnest($1::text[], $2::text[], $3::text[]) AS k(b, p, u)) l
		ORDER BY h`, boards, periods, users)
}

// queueReadEntries queues the read of the entries' current state into out (a statement
// after their locks: it sees what the batch that held them last committed).
func queueReadEntries(b *pgx.Batch, keys []EntryKey, out map[EntryKey]EntryState) {
	boards, periods, users := splitKeys(keys)
	b.Queue(`SELECT `+entryColumns+`
		FROM unnest($1::text[], $2::text[], $3::text[]) AS k(b, p, u)
		JOIN board_entries e ON e.board_id = k.b AND e.period = k.p AND e.user_id = k.u`,
		boards, periods, users).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			s, err := scanEntry(rows)
			if err != nil {
				return err
			}
			out[s.Key()] = s
		}
		return rows.Err()
	})
}

func splitKeys(keys []EntryKey) (boards, periods, users pgTexts) {
	boards, periods, users = make(pgTexts, len(keys)), make(pgTexts, len(keys)), make(pgTexts, len(keys))
	for i, k := range keys {
		boards[i], periods[i], users[i] = k.Board, k.Period, k.UserID
	}
	return boards, periods, users
}

// queueReadRemoved queues the read of the versions removed entries among keys had when
// they were removed (removed_entries) into out.
func queueReadRemoved(b *pgx.Batch, keys []EntryKey, out map[EntryKey]int64) {
	boards, periods, users := splitKeys(keys)
	b.Queue(`SELECT r.board_id, r.period, r.user_id, r.version
		FROM unnest($1::text[], $2::text[], $3::text[]) AS k(b, p, u)
		JOIN removed_entries r ON r.board_id = k.b AND r.period = k.p AND r.user_id = k.u`,
		boards, periods, users).Query(func(rows pgx.Rows) error {
		var k EntryKey
		var v int64
		_, err := pgx.ForEachRow(rows, []any{&k.Board, &k.Period, &k.UserID, &v}, func() error {
			out[k] = v
			return nil
		})
		return err
	})
}

// queueWriteEntries writes absolute entry states and deletes removed entries, recording
// the version each had when removed (removed_entries). A new entry
// of a banned user is hidden from the start; an existing entry keeps its hidden flag. The
// rows written replace their entries' states in current as the batch's results are read
// (a removed entry stays there: the caller knows it is gone). An entry of a period that
// was frozen (Ranks.Freeze) stays frozen, its copy of the rank kept current; the others'
// copies stay NULL, so that no indexed column changes and the update is HOT.
//
// Entries that current holds (read under the batch's entry locks) are updated in place, the
// others inserted: only the projector, holding those locks, inserts or deletes entries, so
// neither set changes underneath. A plain UPDATE writes one WAL record per entry where an
// upsert that finds its row also locks it first (a second record).
func queueWriteEntries(b *pgx.Batch, all []EntryState, current map[EntryKey]EntryState) {
	var updates, inserts, removed []EntryState
	for _, s := range all {
		switch _, exists := current[s.Key()]; {
		case s.Removed:
			removed = append(removed, s)
		case exists:
			updates = append(updates, s)
		default:
			inserts = append(inserts, s)
		}
	}
	if len(removed) > 0 {
		boards, periods, users, versions := make(pgTexts, len(removed)), make(pgTexts, len(removed)), make(pgTexts, len(removed)), make(pgInt64s, len(removed))
		for i, s := range removed {
			boards[i], periods[i], users[i], versions[i] = s.Board, s.Period, s.UserID, s.Version
		}
		b.Queue(`DELETE FROM board_entries e USING unnest($1::text[], $2::text[], $3::text[]) AS k(b, p, u)
			WHERE e.board_id = k.b AND e.period = k.p AND e.user_id = k.u`, boards, periods, users)
		b.Queue(`INSERT INTO removed_entries (board_id, period, user_id, version)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
			ON CONFLICT (board_id, period, user_id) DO UPDATE SET version = excluded.version, removed_at = now()`,
			boards, periods, users, versions)
	}
	if len(updates) > 0 {
		queueEntryStates(b, "update", `
		UPDATE board_entries AS e SET score = k.score, sort_key = k.sort_key, version = k.version,
			reached_at = k.reached_at, updated_at = k.updated_at, metadata = k.metadata,
			closed_sort_key = CASE WHEN e.closed_sort_key IS NOT NULL THEN k.sort_key END,
			closed_reached_at = CASE WHEN e.closed_sort_key IS NOT NULL THEN k.reached_at END
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::timestamptz[], $8::timestamptz[], $9::jsonb[])
			AS k(b, p, u, score, sort_key, version, reached_at, updated_at, metadata)
		WHERE e.board_id = k.b AND e.period = k.p AND e.user_id = k.u
		RETURNING `+entryColumns, updates, current)
	}
	if len(inserts) > 0 {
		queueEntryStates(b, "insert", `
		INSERT INTO board_entries AS e (board_id, period, user_id, score, sort_key, version, reached_at, updated_at, metadata, hidden)
		SELECT k.*, EXISTS (SELECT 1 FROM user_bans x WHERE x.user_id = k.u)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::timestamptz[], $8::timestamptz[], $9::jsonb[])
			AS k(b, p, u, score, sort_key, version, reached_at, updated_at, metadata)
		ON CONFLICT (board_id, period, user_id) DO UPDATE SET score = excluded.score, sort_key = excluded.sort_key,
			version = excluded.version, reached_at = excluded.reached_at, updated_at = excluded.updated_at, metadata = excluded.metadata,
			closed_sort_key = CASE WHEN e.closed_sort_key IS NOT NULL THEN excluded.sort_key END,
			closed_reached_at = CASE WHEN e.closed_sort_key IS NOT NULL THEN excluded.reached_at END
		RETURNING `+entryColumns, inserts, current)
	}
}

// queueEntryStates queues sql, a write of states as nine arrays (board, period, user,
// score, sort key, version, reach time, update time, metadata) returning entryColumns, and
// puts the rows it returns into current; a write that returns another number of rows than
// it was given states fails the batch.
func queueEntryStates(b *pgx.Batch, what, sql string, states []EntryState, current map[EntryKey]EntryState) {
	n := len(states)
	boards, periods, users := make(pgTexts, n), make(pgTexts, n), make(pgTexts, n)
	scores, sortKeys, versions := make(pgInt64s, n), make(pgInt64s, n), make(pgInt64s, n)
	reached, updated, metas := make(pgTimes, n), make(pgTimes, n), make([]*string, n)
	for i, s := range states {
		boards[i], periods[i], users[i], scores[i], sortKeys[i], versions[i] = s.Board, s.Period, s.UserID, s.Score, s.SortKey, s.Version
		reached[i], updated[i], metas[i] = s.ReachedAt, s.UpdatedAt, jsonText(s.Metadata)
	}
	b.Queue(sql, boards, periods, users, scores, sortKeys, versions, reached, updated, metas).Query(func(rows pgx.Rows) error {
		written := 0
		for rows.Next() {
			s, err := scanEntry(rows)
			if err != nil {
				return err
			}
			current[s.Key()] = s
			written++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if written != n {
			return fmt.Errorf("entry %s returned %d rows for %d states", what, written, n)
		}
		return nil
	})
}

// queueNickNames queues the write of the users' nick names and the read of every entry
// of each user whose name it changed (or set first), on every board and period: the Redis
// mirror keeps a name per board period, and these entries carry the new one there too, as
// PostgreSQL's reads (and a rebuild) show it. The slice is filled when the batch's results
// are read (nil when no user is named).
func queueNickNames(b *pgx.Batch, names map[string]string) *[]EntryState {
	if len(names) == 0 {
		return nil
	}
	users := make([]string, 0, len(names))
	for u := range names {
		users = append(users, u)
	}
	sort.Strings(users)
	nicks := make([]string, len(users))
	for i, u := range users {
		nicks[i] = names[u]
	}
	return queueEntries(b, `
		WITH renamed AS (
			INSERT INTO users (user_id, nick_name) SELECT * FROM unnest($1::text[], $2::text[])
			ON CONFLICT (user_id) DO UPDATE SET nick_name = excluded.nick_name, updated_at = now()
			WHERE users.nick_name IS DISTINCT FROM excluded.nick_name
			RETURNING user_id)
		SELECT `+entryColumns+` FROM board_entries e WHERE e.user_id IN (SELECT user_id FROM renamed) ORDER BY 1, 2, 3`,
		users, nicks)
}

// queueDeleteForwarded queues, for each outbox shard below shards that events name rows
// of, the delete of those rows whose uuid is their event's id. The rows are found by
// primary key one by one, then deleted by ctid (a TID scan: it locks them in ctid order,
// as the prune does, so two deletes of the same rows cannot deadlock).
func queueDeleteForwarded(b *pgx.Batch, events []ScoreEvent, shards int) {
	type key struct {
		shard  int
		tx     string
		offset int64
	}
	type rows struct {
		txs     pgTexts
		offsets pgInt64s
		ids     pgTexts
	}
	seen := map[key]bool{}
	byShard := map[int]*rows{}
	for _, e := range events {
		r := e.Outbox
		k := key{r.Shard, r.TxID, r.Offset}
		if r.TxID == "" || seen[k] { // the events of a command on several boards name one row
			continue
		}
		seen[k] = true
		s := byShard[r.Shard]
		if s == nil {
			s = &rows{}
			byShard[r.Shard] = s
		}
		s.txs, s.offsets, s.ids = append(s.txs, r.TxID), append(s.offsets, r.Offset), append(s.ids, e.EventID)
	}
	schema := NewOutboxSchema()
	for shard := range shards { // a row of a shard out of range is left alone
		s := byShard[shard]
		if s == nil {
			continue
		}
		b.Queue(deleteForwardedSQL(schema.Messages.MessagesTable(schema.Topic(shard))), s.txs, s.offsets, s.ids)
	}
}

// deleteForwardedSQL deletes from messages table msgs the rows named by their transaction
// ids ($1, as text), offsets ($2) and uuids ($3).
func deleteForwardedSQL(msgs string) string {
	return `
		DELETE FROM ` + msgs + ` WHERE ctid = ANY (ARRAY(
			SELECT (SELECT o.ctid FROM ` + msgs + ` o WHERE o.transaction_id = k.t::xid8 AND o."offset" = k.off AND o.uuid = k.id)
			FROM unnest($1::text[], $2::bigint[], $3::text[]) AS k(t, off, id)))`
}

// queueLoadSynced queues the read of every entry of the synced users; the slice is filled
// when the batch's results are read.
func queueLoadSynced(b *pgx.Batch, synced []string) *[]EntryState {
	return queueEntries(b, `SELECT `+entryColumns+` FROM board_entries e WHERE e.user_id = ANY($1) ORDER BY 1, 2, 3`, synced)
}

// queueEntries queues a query of entries (entryColumns); the slice is filled when the
// batch's results are read.
func queueEntries(b *pgx.Batch, query string, args ...any) *[]EntryState {
	out := new([]EntryState)
	b.Queue(query, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			s, err := scanEntry(rows)
			if err != nil {
				return err
			}
			*out = append(*out, s)
		}
		return rows.Err()
	})
	return out
}

// entryColumns are the columns of board_entries e that scanEntry reads.
const entryColumns = `e.board_id, e.period, e.user_id, e.score, e.sort_key, e.version, e.reached_at, e.updated_at, e.metadata, e.hidden`

func scanEntry(row pgx.Row) (EntryState, error) {
	var s EntryState
	var meta []byte
	err := row.Scan(&s.Board, &s.Period, &s.UserID, &s.Score, &s.SortKey, &s.Version, &s.ReachedAt, &s.UpdatedAt, &meta, &s.Hidden)
	if len(meta) > 0 {
		s.Metadata = meta
	}
	return s, err
}

// jsonText passes a JSON value to PostgreSQL as text (nil: SQL NULL).
func jsonText(b []byte) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}
