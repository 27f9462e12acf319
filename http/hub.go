package http

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// Errors a subscription can be refused with.
var (
	errTooManyStreams     = errors.New("too many realtime streams")
	errShuttingDown       = errors.New("shutting down")
	errTooManyUserStreams = errors.New("too many realtime streams for this user")
)

// HubConfig bounds the realtime hub.
type HubConfig struct {
	// Window is the coalescing window: at most one leaderboard event per board and client
	// per window (default 250 ms).
	Window time.Duration
	// MaxStreams and MaxStreamsPerUser cap open streams (defaults 19,000 and 5).
	MaxStreams        int
	MaxStreamsPerUser int
	// MaxBehind is how long a client may leave a snapshot unsent before it is dropped
	// (default 10 s).
	MaxBehind time.Duration
	// TopSize is how many entries a leaderboard event carries (default 10).
	TopSize int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// NextReset tells when a board period ends, when it is the board's current period and
	// rolls over by the clock; snapshots carry it (next_reset_at).
	NextReset func(board, period string) (time.Time, bool)
	// Tops reads a top from Redis alone, for the refresh of the followed tops (RefreshAll):
	// storage.ErrNotLoaded when Redis does not hold the period (nil: the hub's board reader).
	Tops TopReader
	// Kept tells whether Redis keeps a board period (Periods.Kept; nil: every one). A
	// period it does not keep is read with the hub's board reader (PostgreSQL), as GET /top
	// reads it, and its snapshots are closed ones: Redis may still hold its keys, which
	// nothing writes any more.
	Kept func(ctx context.Context, board, period string) (bool, error)
}

// TopReader reads a board period's top.
type TopReader interface {
	Top(ctx context.Context, board, period string, limit int) (storage.Top, error)
}

func (c *HubConfig) setDefaults() {
	if c.Window <= 0 {
		c.Window = 250 * time.Millisecond
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 19_000
	}
	if c.MaxStreamsPerUser <= 0 {
		c.MaxStreamsPerUser = 5
	}
	if c.MaxBehind <= 0 {
		c.MaxBehind = 10 * time.Second
	}
	if c.TopSize <= 0 {
		c.TopSize = 10
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Frame is one SSE event, ready to be written.
type Frame struct {
	ID    string // the id line; empty for none
	Event string
	Data  []byte
}

// snapshot is a rendered top with its version; entries is the JSON of its entries (what
// a client shows of it).
type snapshot struct {
	key     string // board:period
	version int64
	data    []byte
	entries []byte
	// closed: read from PostgreSQL for a period Redis does not keep (version 0), which
	// replaces whatever the client has when its entries differ: Redis's versions of the
	// period, if it had some, are of keys nothing writes any more.
	closed bool
}

// Hub fans board snapshots and per-user rank updates out to SSE clients. Each client
// holds only the newest snapshot not yet written, so a slow client gets coalesced
// updates and never a superseded one; a client that stays behind is dropped.
type Hub struct {
	cfg    HubConfig
	boards BoardReader

	mu     sync.Mutex
	latest map[string]snapshot // board:period -> newest snapshot
	// closedNext is where the next refresh round begins among the followed periods Redis
	// does not keep (RefreshAll reads at most closedPerRound of them a round).
	closedNext int
	clients    map[string]map[*client]bool
	byUser     map[string]map[*client]bool
	total      int
	closed     bool

	streams prometheus.Gauge
	dropped prometheus.Counter
	sent    *prometheus.CounterVec
}

// NewHub returns a hub reading user ranks from boards.
func NewHub(cfg HubConfig, boards BoardReader, reg prometheus.Registerer) *Hub {
	cfg.setDefaults()
	h := &Hub{
		cfg: cfg, boards: boards, latest: map[string]snapshot{}, clients: map[string]map[*client]bool{},
		byUser:  map[string]map[*client]bool{},
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "leaderboard_sse_clients", Help: "Open realtime streams."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "leaderboard_sse_dropped_total", Help: "Streams closed because the client stayed behind or a write failed."}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "leaderboard_sse_events_total", Help: "Events written to realtime streams, by event name."},
			[]string{"event"}),
	}
	if reg != nil {
		reg.MustRegister(h.streams, h.dropped, h.sent)
	}
	return h
}

// client is the hub's side of one subscription.
type client struct {
	user, key     string // key is board:period
	board, period string
	wake          chan struct{}
	gone          chan struct{}
	goneOnce      sync.Once

	mu           sync.Mutex
	following    string    // the board:period whose snapshots it takes (key, as of Move)
	top          *snapshot // newest snapshot not yet handed out
	topSince     time.Time // when top became pending
	lastVersion  int64     // newest snapshot version queued or handed out
	lastEntries  []byte    // the entries of that snapshot (nil: none yet, or a new period)
	userEvents   []Frame   // user.rank.updated and user.rank.removed
	userVersion  int64     // the version of the newest own entry queued (0: none, or a new period)
	userRank     int64     // that entry's rank when it was read (others passing it move it)
	userShown    bool      // an own entry of the followed period was queued, and not withdrawn since
	userTold     uint64    // own-entry reads told (notifications, connects, moves): a refresh read before one yields to it
	lastTopWrite time.Time
	// movedFrom is the newest version the client had before a move whose snapshot is still
	// to come (Move), so that a move tried again does not take it for a client with none.
	movedFrom int64
}

func (c *client) drop() { c.goneOnce.Do(func() { close(c.gone) }) }

func (c *client) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// offerTop queues a snapshot if it is newer than what the client has and shows other
// entries (a newer top whose streamed part is the same, entries past TopSize changed, is
// not sent: the client would get the same board again with a new id); it reports false
// when the client has had an unsent snapshot for longer than maxBehind at now.
func (c *client) offerTop(s snapshot, maxBehind time.Duration, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A top read from PostgreSQL for a period Redis does not keep (closed, version 0)
	// follows another one when its entries differ.
	if s.key != c.following || !s.closed && (s.version < c.lastVersion || s.version == c.lastVersion && s.version > 0) ||
		c.lastEntries != nil && bytes.Equal(c.lastEntries, s.entries) {
		return true // another period's (the client moved while it was being published), or nothing new
	}
	if c.top != nil && now.Sub(c.topSince) > maxBehind {
		return false
	}
	if c.top == nil {
		c.topSince = now
	}
	c.top, c.lastVersion, c.lastEntries = &s, s.version, s.entries
	c.signal()
	return true
}

// take returns what the client should write at now: the pending snapshot once the window
// since the last one has passed (wait says how long until then), and user events.
func (c *client) take(window time.Duration, now time.Time) (top *snapshot, users []Frame, wait time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	users, c.userEvents = c.userEvents, nil
	if c.top != nil {
		if since := now.Sub(c.lastTopWrite); since < window {
			return nil, users, window - since
		}
		top, c.top = c.top, nil
		c.lastTopWrite = now
	}
	return top, users, 0
}

// Subscription is one stream's feed: Frames hands out what is due, Ready signals that
// something may be, Done closes when the hub ends the stream.
type Subscription struct {
	hub *Hub
	c   *client
}

// Subscribe opens a feed of a board's top (and the user's own rank updates), enforcing the
// stream caps. The client is taken to hold version lastVersion already (-1: none), so
// nothing older or equal is ever handed to it; the current snapshot is queued if newer.
func (h *Hub) Subscribe(ctx context.Context, user, board, period string, lastVersion int64) (*Subscription, error) {
	return h.subscribe(ctx, user, board, period, lastVersion, false)
}

// SubscribeFollowing is Subscribe for a stream of a board's current period that rolls
// over (daily, weekly, season): a lastVersion above the newest of the period is taken for
// the previous period's (see notFrom), and the client gets the snapshot.
func (h *Hub) SubscribeFollowing(ctx context.Context, user, board, period string, lastVersion int64) (*Subscription, error) {
	return h.subscribe(ctx, user, board, period, lastVersion, true)
}

func (h *Hub) subscribe(ctx context.Context, user, board, period string, lastVersion int64, following bool) (*Subscription, error) {
	c, err := h.register(user, board, period, lastVersion)
	if err != nil {
		return nil, err
	}
	// The snapshot is read after registering, so no update can fall in between.
	snap, err := h.snapshot(ctx, board, period)
	if err != nil {
		h.unregister(c)
		return nil, err
	}
	if following {
		c.notFrom(snap.version)
	}
	c.offerTop(snap, h.cfg.MaxBehind, h.cfg.Now())
	h.offerOwnEntry(ctx, c, period)
	return &Subscription{hub: h, c: c}, nil
}

// notFrom forgets the version a client reconnected with (Last-Event-ID) when it is above
// the newest one of the current period it follows (version, read from Redis after
// registering): it is the previous period's. Versions of a board rise across its periods,
// but a late write of the previous period can take one above the top the current period
// got at the reset; a client that saw it and reconnected did not get the current period's
// top. (Of a board with one period, such an id is a client ahead: it gets nothing older.)
func (c *client) notFrom(version int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if version > 0 && c.lastVersion > version && c.top == nil {
		c.lastVersion = -1
	}
}

// offerOwnEntry queues the stream user's own entry on the board period, when there is one,
// so a client shows its rank from the start, also outside the top.
func (h *Hub) offerOwnEntry(ctx context.Context, c *client, period string) {
	e, err := h.boards.User(ctx, c.board, period, c.user)
	if err != nil {
		return
	}
	c.offerUser(c.board+":"+period, e.Version, e.Rank, h.renderUser(c.board, period, c.user, e))
}

// offerUser queues the user's own entry of the board period key at the entry's version,
// unless the client follows another period now or holds a newer version of the entry
// already: a read answered after a later one (the read at connect, or at a reset, and the
// one of a change told meanwhile) never replaces what the client shows with an older entry.
func (c *client) offerUser(key string, version, rank int64, data []byte) {
	c.queueUser(key, version, rank, data, false, 0)
}

// told is the count of own-entry reads told to the client so far (queueUser).
func (c *client) told() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.userTold
}

// queueUser queues an own-entry event: an entry of a version at a rank (offerUser), or a
// withdrawal (version -1, data a user.rank.removed event), queued only when the client
// shows an entry. A refresh's read (refreshed, begun when the client had been told told)
// yields to any read told since (a removal told meanwhile carries no version: the refresh
// would bring the entry back), and queues a version the client was sent already only at
// another rank: other players passed the entry, or fell behind it.
func (c *client) queueUser(key string, version, rank int64, data []byte, refreshed bool, told uint64) {
	c.mu.Lock()
	if !refreshed {
		c.userTold++
	}
	var stale bool
	switch {
	case c.following != key, refreshed && told != c.userTold:
		stale = true
	case version < 0:
		stale = !c.userShown
	default:
		stale = version < c.userVersion || refreshed && version == c.userVersion && rank == c.userRank
	}
	if stale {
		c.mu.Unlock()
		return
	}
	if version >= 0 {
		c.userVersion, c.userRank = version, rank
	}
	c.userShown = version >= 0
	f := Frame{Event: "user.rank.updated", Data: data}
	if version < 0 {
		f.Event = "user.rank.removed"
	}
	if len(c.userEvents) < 16 { // only the newest matter; never grow without bound
		c.userEvents = append(c.userEvents, f)
	} else {
		c.userEvents[len(c.userEvents)-1] = f
	}
	c.mu.Unlock()
	c.signal()
}

// Frames returns the frames due now, and how long until a snapshot held back by the
// coalescing window is due (0 when none is held).
func (s *Subscription) Frames() ([]Frame, time.Duration) {
	top, users, wait := s.c.take(s.hub.cfg.Window, s.hub.cfg.Now())
	frames := make([]Frame, 0, len(users)+1)
	if top != nil { // the top first: a client replaces its board, then places the user
		frames = append(frames, Frame{ID: strconv.FormatInt(top.version, 10), Event: "leaderboard.updated", Data: top.data})
		s.hub.sent.WithLabelValues("leaderboard.updated").Inc()
	}
	for _, u := range users {
		frames = append(frames, u)
		s.hub.sent.WithLabelValues(u.Event).Inc()
	}
	return frames, wait
}

// Period is the board period the subscription follows.
func (s *Subscription) Period() string {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.c.period
}

// errNoRedisVersion is a move's snapshot withheld: read from PostgreSQL while Redis is
// down (version 0), after versions from Redis, which would make the stream's ids go back.
var errNoRedisVersion = errors.New("the new period's top was read without a version (Redis unavailable); reading it again")

// Move switches the subscription to another period of its board (a reset) and queues
// that period's snapshot, whatever version the client had of the old one; but not a
// snapshot read from PostgreSQL while Redis is down (version 0) after versions from Redis,
// which would make the stream's ids go back: Move then answers errNoRedisVersion, and the
// caller moves again later (the read then loads the period into Redis once it is back: on
// a quiet board no notification would ever bring its top). A move again to the period the
// client already has a top of from Redis (a notification came meanwhile) keeps that top.
func (s *Subscription) Move(ctx context.Context, period string) error {
	h, c := s.hub, s.c
	key := c.board + ":" + period
	// The client stops taking the old period's snapshots first: one being published to it
	// now is refused, and cannot replace the new period's (nor raise the version above it).
	c.mu.Lock()
	if c.following == key && c.lastVersion > 0 && c.movedFrom > 0 {
		c.movedFrom = 0
		c.mu.Unlock()
		h.offerOwnEntry(ctx, c, period)
		return nil
	}
	had := max(c.lastVersion, c.movedFrom)
	if c.following != key { // the old period's own entry, queued and not yet written, goes too
		c.userVersion, c.userShown, c.userEvents = 0, false, nil
	}
	c.top, c.lastVersion, c.lastEntries, c.following, c.movedFrom = nil, -1, nil, key, had
	c.mu.Unlock()
	h.mu.Lock()
	h.leave(c)
	c.period, c.key = period, key
	if h.clients[c.key] == nil {
		h.clients[c.key] = map[*client]bool{}
	}
	h.clients[c.key][c] = true
	h.mu.Unlock()
	snap, err := h.snapshot(ctx, c.board, period)
	if err != nil {
		return err
	}
	h.offerOwnEntry(ctx, c, period)
	if snap.version <= 0 && had > 0 && !snap.closed {
		return errNoRedisVersion
	}
	c.offerTop(snap, h.cfg.MaxBehind, h.cfg.Now())
	c.mu.Lock()
	c.movedFrom = 0
	c.mu.Unlock()
	return nil
}

// Ready signals that frames may be due.
func (s *Subscription) Ready() <-chan struct{} { return s.c.wake }

// Done is closed when the hub ends the stream: the client stayed behind, or the hub closed.
func (s *Subscription) Done() <-chan struct{} { return s.c.gone }

// Close ends the subscription; failed counts it as dropped (a write to the client failed).
func (s *Subscription) Close(failed bool) {
	if failed {
		s.hub.dropped.Inc()
	}
	s.hub.unregister(s.c)
}

// register adds a stream, enforcing the caps.
func (h *Hub) register(user, board, period string, lastVersion int64) (*client, error) {
	key := board + ":" + period
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errShuttingDown
	}
	if h.total >= h.cfg.MaxStreams {
		return nil, errTooManyStreams
	}
	if len(h.byUser[user]) >= h.cfg.MaxStreamsPerUser {
		return nil, errTooManyUserStreams
	}
	c := &client{user: user, key: key, board: board, period: period, wake: make(chan struct{}, 1), gone: make(chan struct{}), lastVersion: lastVersion, following: key}
	if h.clients[key] == nil {
		h.clients[key] = map[*client]bool{}
	}
	if h.byUser[user] == nil {
		h.byUser[user] = map[*client]bool{}
	}
	h.clients[key][c], h.byUser[user][c] = true, true
	h.total++
	h.streams.Inc()
	return c, nil
}

func (h *Hub) unregister(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.clients[c.key][c] {
		return
	}
	h.leave(c)
	delete(h.byUser[c.user], c)
	if len(h.byUser[c.user]) == 0 {
		delete(h.byUser, c.user)
	}
	h.total--
	h.streams.Dec()
}

// leave takes a client off its board period (h.mu held); the last one to leave takes the
// period's snapshot with it: the hub keeps only what streams follow, not every match and
// day it was told about.
func (h *Hub) leave(c *client) {
	delete(h.clients[c.key], c)
	if len(h.clients[c.key]) == 0 {
		delete(h.clients, c.key)
		delete(h.latest, c.key)
	}
}

// PublishTop takes a board's new top-N (from the notification handler). Older versions
// than the newest seen are ignored, so versions only increase. A board period no stream
// follows is not kept: a stream opened later reads its snapshot from Redis, which the top
// was written to before it was published.
func (h *Hub) PublishTop(board, period string, version int64, updatedAt time.Time, entries []messages.Entry) {
	key := board + ":" + period
	h.mu.Lock()
	followed := len(h.clients[key]) > 0
	h.mu.Unlock()
	if !followed {
		return
	}
	s := h.renderTop(board, period, version, updatedAt, entries)
	h.mu.Lock()
	if len(h.clients[key]) == 0 {
		h.mu.Unlock()
		return
	}
	if cur, ok := h.latest[key]; ok && cur.version >= version {
		h.mu.Unlock()
		return
	}
	h.storeAndOffer(key, s)
}

// Wake wakes every stream of a board, whatever period it follows: one following the
// current period looks at it again (a season an admin just started).
func (h *Hub) Wake(board string) {
	h.mu.Lock()
	var targets []*client
	for _, set := range h.clients {
		for c := range set {
			if c.board == board {
				targets = append(targets, c)
			}
		}
	}
	h.mu.Unlock()
	for _, c := range targets {
		c.signal()
	}
}

// UsersChanged tells the users' open streams their new score and rank on the board; a
// user without an entry any more (removed, or hidden by a ban) gets user.rank.removed on
// the streams that show one.
func (h *Hub) UsersChanged(ctx context.Context, board, period string, users []string) {
	key := board + ":" + period
	for _, u := range users {
		targets := h.streamsOf(key, u)
		if len(targets) == 0 {
			continue
		}
		version, rank, data := int64(-1), int64(0), []byte(nil)
		switch e, err := h.boards.User(ctx, board, period, u); {
		case errors.Is(err, storage.ErrNotFound):
			data = h.renderRemoved(board, period, u)
		case err != nil:
			continue // the next change, or a reconnect, brings it
		default:
			version, rank, data = e.Version, e.Rank, h.renderUser(board, period, u, e)
		}
		for _, c := range targets {
			c.queueUser(key, version, rank, data, false, 0) // not when it moved to another period meanwhile
		}
	}
}

// streamsOf are the user's streams following the board period key.
func (h *Hub) streamsOf(key, user string) []*client {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*client
	for c := range h.byUser[user] {
		if c.key == key {
			out = append(out, c)
		}
	}
	return out
}

// refreshUsers reads the streaming users' own entries again (Refresh), a hundred a read
// (a busy board's refresh would otherwise read them one by one, every 5 s), and queues
// what the streams do not have yet: not over anything told to a stream since its read
// began.
func (h *Hub) refreshUsers(ctx context.Context, board, period string, users []string) {
	key := board + ":" + period
	type target struct {
		c    *client
		told uint64
	}
	for chunk := range slices.Chunk(users, 100) {
		targets := make(map[string][]target, len(chunk))
		for _, u := range chunk {
			for _, c := range h.streamsOf(key, u) {
				targets[u] = append(targets[u], target{c, c.told()})
			}
		}
		es, err := h.boards.Users(ctx, board, period, chunk)
		if err != nil {
			return // the next refresh, or the next change, brings them
		}
		found := make(map[string]storage.Entry, len(es))
		for _, e := range es {
			found[e.UserID] = e
		}
		for u, ts := range targets {
			version, rank, data := int64(-1), int64(0), h.renderRemoved(board, period, u)
			if e, ok := found[u]; ok {
				version, rank, data = e.Version, e.Rank, h.renderUser(board, period, u, e)
			}
			for _, t := range ts {
				t.c.queueUser(key, version, rank, data, true, t.told)
			}
		}
	}
}

// storeAndOffer makes s the hub's newest snapshot of key and offers it to the period's
// clients, dropping those that stayed behind. Called with h.mu held; it releases it.
func (h *Hub) storeAndOffer(key string, s snapshot) {
	h.latest[key] = s
	targets := make([]*client, 0, len(h.clients[key]))
	for c := range h.clients[key] {
		targets = append(targets, c)
	}
	h.mu.Unlock()
	now := h.cfg.Now()
	for _, c := range targets {
		if !c.offerTop(s, h.cfg.MaxBehind, now) {
			h.dropped.Inc()
			c.drop()
		}
	}
}

// publishUnversioned publishes a top read from PostgreSQL (version 0) when its entries
// differ from the hub's: for a period Redis does not keep (closed), whatever the hub had;
// otherwise (Redis went down during the read) only when the hub has no top of the period
// from Redis (the stream's ids would go back).
func (h *Hub) publishUnversioned(board, period string, top storage.Top, closed bool) {
	key := board + ":" + period
	s := h.renderTop(board, period, 0, top.UpdatedAt, entriesOf(top))
	s.closed = closed
	h.mu.Lock()
	if cur, ok := h.latest[key]; len(h.clients[key]) == 0 || ok && (cur.version > 0 && !closed || bytes.Equal(cur.entries, s.entries)) {
		h.mu.Unlock()
		return
	}
	h.storeAndOffer(key, s)
}

// Refresh reads a board period's top from Redis and publishes it when it is newer than
// the hub's: a rebuild, which swaps a repaired top in without a notification, reaches the
// streams so. The own entries of the users streaming the period are read again too, and
// sent where they changed: other players passing a user (below the top as well) move its
// rank without a change of its entry, and a notification lost on its way (Kafka down)
// would leave an entry stale for good.
func (h *Hub) Refresh(ctx context.Context, board, period string) error {
	tops := h.cfg.Tops
	if tops == nil {
		tops = h.boards
	}
	top, err := tops.Top(ctx, board, period, h.cfg.TopSize)
	if errors.Is(err, storage.ErrNotLoaded) && tops != h.boards {
		top, err = h.boards.Top(ctx, board, period, h.cfg.TopSize) // expired: loaded again, as GET /top does
	}
	if err != nil {
		return err
	}
	return h.publishRefreshed(ctx, board, period, top, false)
}

// refreshClosed reads a period Redis does not keep as GET /top reads it (from
// PostgreSQL): no notification brings its changes (a ban, an adjustment).
func (h *Hub) refreshClosed(ctx context.Context, board, period string) error {
	top, err := h.boards.Top(ctx, board, period, h.cfg.TopSize)
	if err != nil {
		return err
	}
	return h.publishRefreshed(ctx, board, period, top, true)
}

// publishRefreshed publishes a refresh's top and reads again the own entries of the users
// streaming the period.
func (h *Hub) publishRefreshed(ctx context.Context, board, period string, top storage.Top, closed bool) error {
	key := board + ":" + period
	if top.Version <= 0 {
		h.publishUnversioned(board, period, top, closed)
	} else {
		h.PublishTop(board, period, top.Version, top.UpdatedAt, entriesOf(top))
	}
	h.mu.Lock()
	users := make([]string, 0, len(h.clients[key]))
	for c := range h.clients[key] {
		users = append(users, c.user)
	}
	h.mu.Unlock()
	slices.Sort(users)
	h.refreshUsers(ctx, board, period, slices.Compact(users))
	return nil
}

// closedPerRound bounds the followed periods Redis does not keep that one refresh round
// reads from PostgreSQL (three queries each), and closedReadTimeout each one's time: any
// token holder can follow past days.
const (
	closedPerRound    = 20
	closedReadTimeout = 2 * time.Second
)

// RefreshAll refreshes the board periods streams follow (another process's rebuild, a
// notification lost on the way): those Redis keeps, until Redis is unavailable (every
// read would wait out its timeout); then up to closedPerRound of those it does not keep,
// taking turns, from PostgreSQL (a ban or an adjustment of a past day), until PostgreSQL
// fails. Another error skips its period; the first is returned.
func (h *Hub) RefreshAll(ctx context.Context) error {
	type boardPeriod struct{ board, period string }
	h.mu.Lock()
	followed := make([]boardPeriod, 0, len(h.clients))
	for key, set := range h.clients {
		for c := range set {
			if len(key) > len(c.board) && key[:len(c.board)] == c.board {
				followed = append(followed, boardPeriod{c.board, key[len(c.board)+1:]})
			}
			break
		}
	}
	h.mu.Unlock()
	var first error
	note := func(err error) {
		if first == nil {
			first = err
		}
	}
	var closed []boardPeriod
	redisDown := false
	for _, f := range followed {
		if h.cfg.Kept != nil {
			kept, err := h.cfg.Kept(ctx, f.board, f.period)
			if err != nil {
				note(err)
				continue
			}
			if !kept {
				closed = append(closed, f)
				continue
			}
		}
		if redisDown {
			continue
		}
		switch err := h.Refresh(ctx, f.board, f.period); {
		case err == nil:
		case errors.Is(err, storage.ErrUnavailable):
			note(err)
			redisDown = true
		default:
			note(err)
		}
	}
	if len(closed) == 0 {
		return first
	}
	slices.SortFunc(closed, func(a, b boardPeriod) int {
		return cmp.Or(strings.Compare(a.board, b.board), strings.Compare(a.period, b.period))
	})
	h.mu.Lock()
	start := h.closedNext % len(closed)
	h.closedNext = start + closedPerRound
	h.mu.Unlock()
	for i := range min(len(closed), closedPerRound) {
		f := closed[(start+i)%len(closed)]
		cctx, cancel := context.WithTimeout(ctx, closedReadTimeout)
		err := h.refreshClosed(cctx, f.board, f.period)
		cancel()
		if err != nil {
			note(err)
			if errors.Is(err, storage.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
				break // PostgreSQL failing: the others wait for the next round
			}
		}
	}
	return first
}

// RefreshTops refreshes the followed tops every interval until ctx ends.
func RefreshTops(ctx context.Context, hub *Hub, interval time.Duration, logger *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := hub.RefreshAll(ctx); err != nil && ctx.Err() == nil {
				logger.Debug("realtime: refreshing the followed tops", "err", err)
			}
		}
	}
}

func entriesOf(top storage.Top) []messages.Entry {
	entries := make([]messages.Entry, len(top.Entries))
	for i, e := range top.Entries {
		entries[i] = messages.Entry{Rank: e.Rank, UserID: e.UserID, Score: e.Score, NickName: e.NickName, UpdatedAt: e.UpdatedAt, Metadata: e.Metadata}
	}
	return entries
}

// snapshot returns the newest top the hub has seen, or reads it from Redis.
func (h *Hub) snapshot(ctx context.Context, board, period string) (snapshot, error) {
	top, err := h.boards.Top(ctx, board, period, h.cfg.TopSize)
	if err != nil {
		return snapshot{}, err
	}
	s := h.renderTop(board, period, top.Version, top.UpdatedAt, entriesOf(top))
	if top.Version <= 0 && h.cfg.Kept != nil {
		if kept, err := h.cfg.Kept(ctx, board, period); err == nil && !kept {
			// Read from PostgreSQL for a period Redis does not keep: the period as it is,
			// whatever a stream had of it from Redis before.
			s.closed = true
			return s, nil
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.latest[board+":"+period]; ok && cur.version > s.version {
		return cur, nil
	}
	return s, nil
}

func (h *Hub) renderTop(board, period string, version int64, updatedAt time.Time, entries []messages.Entry) snapshot {
	if len(entries) > h.cfg.TopSize {
		entries = entries[:h.cfg.TopSize]
	}
	if entries == nil {
		entries = []messages.Entry{}
	}
	listed, _ := json.Marshal(entries)
	v := map[string]any{"board": board, "period": period, "version": version, "entries": json.RawMessage(listed), "ts": h.cfg.Now().UTC()}
	// When the top last changed, not when this was sent; null for a board without entries,
	// as GET /top has it (the time an empty period was loaded is no change of the board).
	v["updated_at"] = nil
	if !updatedAt.IsZero() && len(entries) > 0 {
		v["updated_at"] = updatedAt.UTC()
	}
	if h.cfg.NextReset != nil {
		if at, ok := h.cfg.NextReset(board, period); ok {
			v["next_reset_at"] = at.UTC()
		}
	}
	data, _ := json.Marshal(v)
	return snapshot{key: board + ":" + period, version: version, data: data, entries: listed}
}

// renderRemoved renders a user.rank.removed event: the user has no entry on the board
// period any more (removed by an admin, or hidden by a ban).
func (h *Hub) renderRemoved(board, period, user string) []byte {
	data, _ := json.Marshal(map[string]any{"user_id": user, "board": board, "period": period, "ts": h.cfg.Now().UTC()})
	return data
}

// renderUser renders a user.rank.updated event.
func (h *Hub) renderUser(board, period, user string, e storage.Entry) []byte {
	v := map[string]any{"user_id": user, "board": board, "period": period, "score": e.Score, "rank": e.Rank, "ts": h.cfg.Now().UTC()}
	if !e.UpdatedAt.IsZero() {
		v["updated_at"] = e.UpdatedAt.UTC()
	}
	data, _ := json.Marshal(v)
	return data
}

// Close ends every stream; new ones are refused.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for _, set := range h.clients {
		for c := range set {
			c.drop()
		}
	}
}
