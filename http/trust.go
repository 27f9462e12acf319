package http

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/openleaderboard/leaderboard/storage"
)

// BanStore is the ban list in PostgreSQL (storage.Bans).
type BanStore interface {
	Version(ctx context.Context) (int64, error)
	// Users is the list with the version it has (one snapshot).
	Users(ctx context.Context) (map[string]bool, int64, error)
}

// BanList is this process's copy of the ban list, for the write path: no I/O per write. A
// ban or unban made through this process applies at once; one made through another API
// process within the refresh interval (it reads the list's version every interval and the
// list when it changed).
type BanList struct {
	store    BanStore
	interval time.Duration
	logger   *slog.Logger

	mu      sync.RWMutex
	users   map[string]bool
	version int64
}

// NewBanList returns the ban list, empty until Load or Run.
func NewBanList(store BanStore, interval time.Duration, logger *slog.Logger) *BanList {
	return &BanList{store: store, interval: interval, logger: logger, users: map[string]bool{}, version: -1}
}

// Banned reports whether the user is banned.
func (b *BanList) Banned(userID string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.users[userID]
}

// set applies a ban or unban made through this process, of the list's version version:
// not when a list of that version or newer is loaded already (it holds this change, or a
// later one of the user's). The loaded version stays: the next Load reads the whole list.
func (b *BanList) set(userID string, banned bool, version int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if version <= b.version {
		return
	}
	if banned {
		b.users[userID] = true
	} else {
		delete(b.users, userID)
	}
}

// Load reads the list when its version changed.
func (b *BanList) Load(ctx context.Context) error {
	v, err := b.store.Version(ctx)
	if err != nil {
		return err
	}
	b.mu.RLock()
	same := v == b.version
	b.mu.RUnlock()
	if same {
		return nil
	}
	users, v, err := b.store.Users(ctx)
	if err != nil {
		return err
	}
	b.mu.Lock()
	if v > b.version {
		b.users, b.version = users, v
	}
	b.mu.Unlock()
	return nil
}

// Run refreshes the list every interval until ctx ends.
func (b *BanList) Run(ctx context.Context) error {
	t := time.NewTicker(b.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := b.Load(ctx); err != nil && ctx.Err() == nil {
			b.logger.Warn("refresh ban list", "err", err)
		}
	}
}

// AnomalyStore keeps refused writes (storage.Anomalies).
type AnomalyStore interface {
	Insert(ctx context.Context, xs []storage.Anomaly) error
	Page(ctx context.Context, before int64, limit int, userID, reason string) ([]storage.Anomaly, error)
}

// AnomalyRecorder records refused writes off the write path: Record only queues (and drops,
// counted, when the queue is full); Run writes the queue to the store in batches. One
// user's refusals are recorded up to anomaliesPerUser a minute, the rest only counted: a
// player sending refused writes as fast as it can (they spend no rate limit) cannot push
// the others' out of the newest the store keeps.
type AnomalyRecorder struct {
	store   AnomalyStore
	queue   chan storage.Anomaly
	logger  *slog.Logger
	dropped prometheus.Counter

	mu      sync.Mutex
	minute  time.Time      // the minute counted in perUser
	perUser map[string]int // refusals recorded in that minute, by user
}

// anomaliesPerUser bounds the refusals of one user recorded a minute; anomalyUsers bounds
// the users counted a minute (past it, a minute's counts start over).
const (
	anomaliesPerUser = 20
	anomalyUsers     = 100_000
)

// NewAnomalyRecorder returns a recorder with a queue of size entries.
func NewAnomalyRecorder(store AnomalyStore, size int, reg prometheus.Registerer, logger *slog.Logger) *AnomalyRecorder {
	a := &AnomalyRecorder{store: store, queue: make(chan storage.Anomaly, size), logger: logger,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leaderboard_anomalies_dropped_total",
			Help: "Refused writes not recorded in the anomaly store (queue full, the store unavailable, or past 20 a minute for one user).",
		}),
		perUser: map[string]int{}}
	reg.MustRegister(a.dropped)
	return a
}

// Record queues an anomaly; it never blocks. Its text fields are made storable (valid
// UTF-8 without NUL), so that no field a client sent can make PostgreSQL refuse the
// batch it is written in, and the other refusals with it.
func (a *AnomalyRecorder) Record(x storage.Anomaly) {
	for _, f := range []*string{&x.Reason, &x.UserID, &x.Board, &x.EventID, &x.Detail} {
		*f = storableText(*f)
	}
	if !a.countUser(x.UserID, x.At) {
		a.dropped.Inc()
		return
	}
	select {
	case a.queue <- x:
	default:
		a.dropped.Inc()
	}
}

// countUser counts one refusal of user at the given time: false when the user already has
// anomaliesPerUser recorded in that minute.
func (a *AnomalyRecorder) countUser(user string, at time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if m := at.Truncate(time.Minute); !m.Equal(a.minute) || len(a.perUser) >= anomalyUsers {
		a.minute = m
		clear(a.perUser)
	}
	if a.perUser[user] >= anomaliesPerUser {
		return false
	}
	a.perUser[user]++
	return true
}

// storableText is s as a PostgreSQL text value can hold it: valid UTF-8 without NUL.
func storableText(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// anomalyBatch bounds one insert.
const anomalyBatch = 500

// Run writes queued anomalies until ctx ends, then what is still queued.
func (a *AnomalyRecorder) Run(ctx context.Context) error {
	batch := make([]storage.Anomaly, 0, anomalyBatch)
	for {
		select {
		case x := <-a.queue:
			batch = append(batch[:0], x)
		case <-ctx.Done():
			a.flush(len(a.queue))
			return nil
		}
		for len(batch) < anomalyBatch {
			select {
			case x := <-a.queue:
				batch = append(batch, x)
				continue
			default:
			}
			break
		}
		a.write(batch)
	}
}

// flush writes up to n queued anomalies at shutdown.
func (a *AnomalyRecorder) flush(n int) {
	batch := make([]storage.Anomaly, 0, n)
	for range n {
		batch = append(batch, <-a.queue)
	}
	if len(batch) > 0 {
		a.write(batch)
	}
}

func (a *AnomalyRecorder) write(batch []storage.Anomaly) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.store.Insert(ctx, batch); err != nil {
		a.dropped.Add(float64(len(batch)))
		a.logger.Warn("record anomalies", "err", err, "dropped", len(batch))
	}
}
