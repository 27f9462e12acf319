package http

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// Limits keeps rate limits and action cooldowns (storage.Limiter, in Redis).
type Limits interface {
	Allow(ctx context.Context, subject string, n int, per time.Duration) (bool, time.Duration, error)
	Cooldown(ctx context.Context, board, userID, action, eventID string, d time.Duration, now time.Time) (taken bool, left time.Duration, err error)
	Release(ctx context.Context, board, userID, action, eventID string) error
	Refund(ctx context.Context, subject string, n int, per time.Duration) error
}

// Guard protects the write path from players: banned users, rate limits (per user, and per
// board where its definition says so), action cooldowns. Every refusal, here and of bad
// values, signatures and server-only boards, is counted by reason and recorded as an
// anomaly. When the limiter's store is unreachable, player writes are refused with 503
// limiter_unavailable (or let through with LEADERBOARD_LIMITER_FAIL_OPEN); server-token
// writes go on.
type Guard struct {
	cfg       configs.Config
	backlog   *Backlog
	limits    Limits
	bans      *BanList
	anomalies *AnomalyRecorder
	now       func() time.Time
	logger    *slog.Logger
	refusals  *prometheus.CounterVec
	failOpen  prometheus.Counter
}

// NewGuard returns the write guard. now is the clock of cooldowns and signatures.
// backlog, when set, refuses every write while the pipeline is too far behind.
func NewGuard(cfg configs.Config, backlog *Backlog, limits Limits, bans *BanList, anomalies *AnomalyRecorder, reg prometheus.Registerer, now func() time.Time, logger *slog.Logger) *Guard {
	g := &Guard{cfg: cfg, backlog: backlog, limits: limits, bans: bans, anomalies: anomalies, now: now, logger: logger,
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaderboard_write_refusals_total",
			Help: "Writes refused to protect the boards, by reason (value_out_of_range, rate_limited, cooldown_active, user_banned, invalid_signature, stale_timestamp, server_only_board, limiter_unavailable, backlog_full).",
		}, []string{"reason"}),
		failOpen: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leaderboard_limiter_fail_open_total",
			Help: "Player writes let through unlimited because the limiter's store was unreachable (LEADERBOARD_LIMITER_FAIL_OPEN).",
		}),
	}
	if now == nil {
		g.now = time.Now
	}
	reg.MustRegister(g.refusals, g.failOpen)
	return g
}

// guarded is one write as the guard sees it.
type guarded struct {
	board   configs.Board
	userID  string
	eventID string
	// server: the token has the server role; subject is the token's sub.
	server  bool
	subject string
	// action is an increment's action_id ("" for none); cooling is set by check when
	// this write took the action's cooldown lock (a retry of the write holding it does
	// not), which release gives back; tookAt is the real time just before it took it.
	action  string
	cooling bool
	tookAt  time.Time
	// spent[:nspent] are the rate budgets check spent a write of, which refund gives back.
	spent  [2]spentBudget
	nspent int
}

// spentBudget is one write taken from a subject's rate budget.
type spentBudget struct {
	subject string
	rate    configs.Rate
}

// errNoGuard refuses every write of a server built without a guard.
var errNoGuard = &apiError{status: http.StatusInternalServerError, code: "internal", message: "the write guard is not configured"}

// refuse counts and records a refusal and returns it.
func (g *Guard) refuse(w guarded, e *apiError, detail string) *apiError {
	if g == nil {
		return e
	}
	g.refusals.WithLabelValues(e.code).Inc()
	if e.code != "limiter_unavailable" && e.code != "backlog_full" { // not a player's doing
		g.anomalies.Record(storage.Anomaly{At: g.now().UTC(), Reason: e.code, UserID: w.userID, Board: w.board.Key(), EventID: w.eventID, Detail: detail})
	}
	return e
}

// check decides whether a write may go on: nil, or the refusal to answer. A write over
// the rate, while the backlog is full or inside a cooldown another write of the action
// took since goes on when retry tells it is a retry of a write accepted before (answered
// as the first time, or 409; it adds nothing), and one of a user banned since when
// sameRetry tells it is the same write again: no refusal then, counted or recorded.
func (g *Guard) check(ctx context.Context, w *guarded, retry, sameRetry func() bool) *apiError {
	if g == nil {
		return errNoGuard
	}
	if g.backlog.Full() && (retry == nil || !retry()) {
		return g.refuse(*w, &apiError{status: http.StatusServiceUnavailable, code: "backlog_full", retryAfter: 2 * time.Second,
			message: "the pipeline is behind; retry with the same event_id"}, "")
	}
	// A retry of a write accepted before the ban is answered as the first time: the write
	// is kept (applied hidden), and a 403 would tell the game it was not.
	if g.bans.Banned(w.userID) && (sameRetry == nil || !sameRetry()) {
		return g.refuse(*w, &apiError{status: http.StatusForbidden, code: "user_banned", message: "user " + w.userID + " is banned"}, "")
	}
	switch e, again := g.rateLimit(ctx, w, retry); {
	case again:
		return nil
	case e != nil:
		return e
	}
	if w.action != "" && w.board.ActionCooldown > 0 {
		w.tookAt = time.Now()
		taken, left, err := g.limits.Cooldown(ctx, w.board.Key(), w.userID, w.action, w.eventID, w.board.ActionCooldown, g.now())
		switch {
		case err != nil:
			return g.limiterDown(*w, err)
		case left > 0 && retry != nil && retry():
			return nil // the lock is another write's: this one takes none (a retry, or a 409)
		case left > 0:
			return g.refuse(*w, &apiError{status: http.StatusTooManyRequests, code: "cooldown_active", retryAfter: left,
				message: fmt.Sprintf("action %s is cooling down for %d more seconds", w.action, seconds(left))}, "action "+w.action)
		}
		w.cooling = taken
	}
	return nil
}

// rateLimit spends one write of the user's budget (and of the board's, when it has one);
// server tokens spend their own budget only when LEADERBOARD_SERVER_RATE_LIMIT is set.
// Over a budget, again tells a retry of a write accepted before (retry), which is not
// refused. What it spent is in w.spent (at most two budgets).
func (g *Guard) rateLimit(ctx context.Context, w *guarded, retry func() bool) (refusal *apiError, again bool) {
	var budgets [2]spentBudget
	all := budgets[:0]
	if w.server {
		all = append(all, spentBudget{"server:" + w.subject, g.cfg.ServerRateLimit})
	} else {
		all = append(all, spentBudget{"user:" + w.userID, g.cfg.RateLimit}, spentBudget{"board:" + w.board.ID + ":" + w.userID, w.board.RateLimit})
	}
	for _, b := range all {
		if b.rate.Off() {
			continue
		}
		ok, wait, err := g.limits.Allow(ctx, b.subject, b.rate.N, b.rate.Per)
		switch {
		case err != nil:
			return g.limiterDown(*w, err), false
		case !ok && retry != nil:
			// Telling a retry from a new write asks PostgreSQL: over the budget, the
			// asking is bounded by the retry budget (a flood of refused writes or
			// retries would otherwise cost a PostgreSQL query each, without end).
			spare, rwait, err := g.retryBudget(ctx, b)
			switch {
			case err != nil:
				return g.limiterDown(*w, err), false
			case !spare:
				return g.refuse(*w, &apiError{status: http.StatusTooManyRequests, code: "rate_limited", retryAfter: max(wait, rwait),
					message: fmt.Sprintf("more than %s writes, and more than %d retries or refused writes; retry in %d seconds", b.rate, retryFactor*b.rate.N, seconds(max(wait, rwait)))}, "retry:"+b.subject), false
			case retry():
				return nil, true
			}
			return g.refuse(*w, &apiError{status: http.StatusTooManyRequests, code: "rate_limited", retryAfter: wait,
				message: fmt.Sprintf("more than %s writes; retry in %d seconds", b.rate, seconds(wait))}, b.subject+" "+b.rate.String()), false
		case !ok:
			return g.refuse(*w, &apiError{status: http.StatusTooManyRequests, code: "rate_limited", retryAfter: wait,
				message: fmt.Sprintf("more than %s writes; retry in %d seconds", b.rate, seconds(wait))}, b.subject+" "+b.rate.String()), false
		}
		w.spent[w.nspent] = b
		w.nspent++
	}
	return nil, false
}

// retryFactor sizes the retry budget: retryFactor times a rate budget's writes, per its
// window.
const retryFactor = 10

// retryBudget spends one of subject's retry budget: the writes that turn out to repeat an
// event id (their rate budget given back) and those over the rate budget (a request log
// lookup each tells whether one is a retry) together. A client retrying a lost answer a
// few times never meets it; a player flooding retries, 409s or refused writes, each a
// PostgreSQL query or transaction, does: past it they are refused without one.
func (g *Guard) retryBudget(ctx context.Context, b spentBudget) (bool, time.Duration, error) {
	return g.limits.Allow(ctx, "retry:"+b.subject, retryFactor*b.rate.N, b.rate.Per)
}

// banned tells whether the user is banned (as the last ban list read says).
func (g *Guard) banned(userID string) bool { return g != nil && g.bans != nil && g.bans.Banned(userID) }

// refund gives back the rate budget a write spent when it turned out to repeat an event id
// (a retry, answered as the first time, or a 409), taking it from the retry budget: a
// client whose answer was lost is not refused its next write for having retried, and a
// player repeating event ids without end runs out of both. (Over its budget a retry
// passes without spending: rateLimit's retry.)
func (g *Guard) refund(ctx context.Context, w guarded) {
	if g == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	for _, b := range w.spent[:w.nspent] {
		if spare, _, err := g.retryBudget(ctx, b); err != nil || !spare {
			continue // the write stays spent
		}
		if err := g.limits.Refund(ctx, b.subject, b.rate.N, b.rate.Per); err != nil {
			g.logger.Warn("refund rate budget", "err", err, "subject", b.subject)
		}
	}
}

// limiterDown decides a write the limiter could not decide: server writes go on, player
// writes fail closed unless the operator chose fail-open.
func (g *Guard) limiterDown(w guarded, err error) *apiError {
	if !errors.Is(err, storage.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		g.logger.Error("limiter failed", "err", err)
	}
	if w.server {
		return nil
	}
	if g.cfg.LimiterFailOpen {
		g.failOpen.Inc()
		return nil
	}
	g.logger.Warn("limiter unavailable: player write refused", "err", err, "user_id", w.userID)
	return g.refuse(w, &apiError{status: http.StatusServiceUnavailable, code: "limiter_unavailable", retryAfter: 5 * time.Second,
		message: "the rate limiter is unavailable; retry with the same event_id"}, err.Error())
}

// release gives back the action's cooldown lock the write took (check) when it was not
// accepted after all.
func (g *Guard) release(ctx context.Context, w guarded) {
	if g == nil || !w.cooling {
		return
	}
	if err := g.limits.Release(context.WithoutCancel(ctx), w.board.Key(), w.userID, w.action, w.eventID); err != nil {
		g.logger.Warn("release cooldown", "err", err, "user_id", w.userID, "action", w.action)
	}
}

// seconds rounds a wait up to whole seconds (at least 1), as Retry-After has it.
func seconds(d time.Duration) int64 { return max(1, int64((d+time.Second-1)/time.Second)) }
