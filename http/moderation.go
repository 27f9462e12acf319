package http

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// Moderation is what the moderation endpoints need.
type Moderation struct {
	// Commands makes a moderation command durable together with its other work (the outbox).
	Commands interface {
		AcceptWith(ctx context.Context, cmd storage.Command, with func(ctx context.Context, tx *sql.Tx) error) (storage.AcceptOutcome, error)
	}
	// Bans is this process's ban list; BanStore reads one ban.
	Bans     *BanList
	BanStore interface {
		Get(ctx context.Context, userID string) (storage.Ban, error)
		// Entries lists every entry of a user in PostgreSQL (storage.Bans).
		Entries(ctx context.Context, userID string) ([]storage.UserEntry, error)
	}
	Anomalies AnomalyStore
	Audit     interface {
		Page(ctx context.Context, before int64, limit int) ([]storage.AuditRecord, error)
	}
	// Holds marks an entry an adjustment or removal is on its way to (storage.Boards.Hold),
	// so that the write path does not answer "unchanged" against what Redis still shows.
	Holds interface {
		Hold(ctx context.Context, board, period, userID, eventID string) (added bool, err error)
		Unhold(ctx context.Context, board, period, userID, eventID string) error
	}
}

// maxReasonChars bounds an admin's reason.
const maxReasonChars = 500

// reasonOf checks an admin's reason: required, at most maxReasonChars characters of
// text (valid UTF-8; of the control characters only tab, newline and carriage return:
// PostgreSQL's text cannot hold a NUL, which was answered 503 as if it were down).
func reasonOf(reason string) *apiError {
	if reason == "" || utf8.RuneCountInString(reason) > maxReasonChars || !utf8.ValidString(reason) || strings.ContainsFunc(reason, badReasonRune) {
		return badRequest("invalid_reason", "reason is required: 1 to %d characters of text", maxReasonChars)
	}
	return nil
}

func badReasonRune(r rune) bool { return r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f }

// moderationCommand is the outbox command of a moderation action, with its idempotency
// hash over what it does and why (reason: the request's body is the same only with the
// same reason): the period as the request named it (requested; "" for the current one),
// not the one it resolved to, so that a retry after a reset is the same request (as a
// player's write is), answered as the first time and not 409.
func moderationCommand(r *http.Request, cmd messages.ScoreSubmitted, requested, reason string) (storage.Command, *apiError) {
	msg, err := commandMessage(cmd, requestIDFrom(r.Context()))
	if err != nil {
		return storage.Command{}, &apiError{status: http.StatusInternalServerError, code: "internal", message: err.Error()}
	}
	if requested == "current" {
		requested = ""
	}
	h := sha256.Sum256(fmt.Appendf(nil, "%s|%s|%s|%s|%d|%s", cmd.Op, cmd.Board, requested, cmd.UserID, cmd.Value, reason))
	return storage.Command{EventID: cmd.EventID, UserID: cmd.UserID, Board: cmd.Board, BodyHash: h[:], Msg: msg}, nil
}

// poll calls ok until it says true, at growing intervals, for up to WaitTimeout in all;
// it reports whether ok said true in time.
func (s *server) poll(ctx context.Context, ok func(ctx context.Context) bool) bool {
	ctx, cancel := context.WithTimeout(ctx, s.WaitTimeout)
	defer cancel()
	delay := 5 * time.Millisecond
	for {
		if ok(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// pending tells whether the command recorded under the event id is an admin's command
// still on its way to the board period (true when the log cannot tell: a hold kept too
// long only sends writes through the pipeline).
func (s *server) pending(ctx context.Context, userID, eventID, board, period string) bool {
	ok, err := s.Requests.Pending(ctx, userID, eventID, board, period)
	return err != nil || ok
}

func (s *server) applied(ctx context.Context, userID, eventID string) bool {
	ok, err := s.Requests.IsApplied(ctx, userID, eventID)
	return err == nil && ok
}

// synced tells whether a ban's or an unban's sync (event eventID) is applied and every
// read shows it.
func (s *server) synced(userID, eventID string) func(ctx context.Context) bool {
	return func(ctx context.Context) bool { return s.applied(ctx, userID, eventID) && s.mirrored(ctx, userID) }
}

// mirrored tells whether Redis shows each of a user's entries as PostgreSQL holds it: a
// hidden entry gone, a visible one there with its score. PostgreSQL commits a ban's or an
// unban's sync before the projector mirrors it, so the sync being applied does not yet
// mean that reads show it. Entries of boards no longer configured, and of periods Redis
// does not keep (read from PostgreSQL), are not looked at.
func (s *server) mirrored(ctx context.Context, userID string) bool {
	entries, err := s.Moderation.BanStore.Entries(ctx, userID)
	if err != nil {
		return false
	}
	for _, e := range entries {
		b, ok := s.Config.Board(e.Board)
		if !ok {
			continue
		}
		cur, err := s.Reads.held(ctx, b, e.Period, userID)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			if !e.Hidden {
				return false
			}
		case err != nil:
			if !errors.Is(err, storage.ErrUnavailable) {
				return false
			}
			// Not in Redis (a period it does not keep or does not hold now, or Redis
			// down): reads come from PostgreSQL, or a load of it, which show the sync
			// already.
		case e.Hidden || cur.Score != e.Score:
			return false
		}
	}
	return true
}

// moderationFailed answers an error of a moderation command.
func (s *server) moderationFailed(w http.ResponseWriter, r *http.Request, err error, eventID string) {
	s.unavailable(w, r, err, eventID)
}

// handleBan answers POST /admin/users/{user_id}/ban {"reason"} and DELETE (unban, with an
// optional {"reason"}): the user's entries are hidden from (or shown again in) every read
// of every board, their writes refused (or taken again) at once; Redis and the streams
// follow through the pipeline (wait=true waits for them). Audited.
func (s *server) handleBan(banned bool) http.HandlerFunc {
	type request struct {
		Reason string `json:"reason"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		userID := chi.URLParam(r, "user_id")
		if !messages.ValidUserID(userID) {
			writeError(w, r, http.StatusBadRequest, "invalid_user_id", "user_id must be 1 to 64 of [A-Za-z0-9_.:-]", "")
			return
		}
		var req request
		if banned || r.ContentLength != 0 {
			if e := decodeStrict(w, r, &req); e != nil {
				writeError(w, r, e.status, e.code, e.message, "")
				return
			}
		}
		if req.Reason != "" || banned {
			if e := reasonOf(req.Reason); e != nil {
				writeError(w, r, e.status, e.code, e.message, "")
				return
			}
		}
		action := "user.ban"
		if !banned {
			action = "user.unban"
		}
		cmd, e := moderationCommand(r, messages.ScoreSubmitted{Op: messages.OpSync, EventID: uuid.NewString(), UserID: userID, OccurredAt: s.Now().UTC()}, "", "")
		if e != nil {
			writeError(w, r, e.status, e.code, e.message, "")
			return
		}
		audit := storage.AuditEntry{Actor: claimsFrom(r.Context()).Subject, Action: action, Target: userID, Reason: req.Reason}
		var version int64
		_, err := s.Moderation.Commands.AcceptWith(r.Context(), cmd, storage.SetBanned(userID, banned, audit, &version))
		switch {
		case errors.Is(err, storage.ErrNotBanned):
			writeError(w, r, http.StatusNotFound, "not_banned", "user "+userID+" is not banned", "")
			return
		case err != nil:
			s.moderationFailed(w, r, err, "")
			return
		}
		s.Moderation.Bans.set(userID, banned, version)
		s.Logger.Info("moderation", "action", action, "user_id", userID, "by", audit.Actor, "reason", req.Reason)
		status := http.StatusAccepted
		if wantsWait(r) && s.poll(r.Context(), s.synced(userID, cmd.EventID)) {
			status = http.StatusOK // every read shows it
		}
		encode(w, status, map[string]any{"user_id": userID, "banned": banned, "event_id": cmd.EventID})
	}
}

// handleGetBan answers GET /admin/users/{user_id}/ban: the user's ban, or 404 not_banned.
func (s *server) handleGetBan() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		userID := chi.URLParam(r, "user_id")
		if !messages.ValidUserID(userID) {
			writeError(w, r, http.StatusBadRequest, "invalid_user_id", "user_id must be 1 to 64 of [A-Za-z0-9_.:-]", "")
			return
		}
		ban, err := s.Moderation.BanStore.Get(r.Context(), userID)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			writeError(w, r, http.StatusNotFound, "not_banned", "user is not banned", "")
		case err != nil:
			s.moderationFailed(w, r, err, "")
		default:
			ban.BannedAt = ban.BannedAt.UTC()
			encode(w, http.StatusOK, ban)
		}
	}
}

// handleAdjust answers POST /admin/boards/{board_id}/entries/{user_id}/adjust {"value",
// "period"?, "reason", "event_id"?}: the entry is set to value through the pipeline,
// exactly once and in the history, whatever the board's operator. Audited.
func (s *server) handleAdjust() http.HandlerFunc {
	type request struct {
		Value   json.RawMessage `json:"value"`
		Period  string          `json:"period"`
		Reason  string          `json:"reason"`
		EventID *string         `json:"event_id"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		b, userID, ok := s.moderatedEntry(w, r)
		if !ok {
			return
		}
		var req request
		if e := decodeStrict(w, r, &req); e != nil {
			writeError(w, r, e.status, e.code, e.message, "")
			return
		}
		eventID, _, e := resolveEventID(req.EventID)
		if e == nil {
			e = reasonOf(req.Reason)
		}
		var value int64
		if e == nil {
			value, e = parseInteger("value", req.Value)
		}
		if e == nil && !b.ValueInBounds(value) {
			e = badRequest("value_out_of_range", "a value on board %s must be from %d to %d", b.Key(), b.MinValue, b.MaxValue)
		}
		if e != nil {
			writeError(w, r, e.status, e.code, e.message, "")
			return
		}
		period, ok := s.resolvePeriod(w, r, b, req.Period)
		if !ok {
			return
		}
		if s.Periods.NotBegun(r.Context(), b, period) {
			// A day or week that has not begun has no entry to set (and one set would sit
			// in Redis until long after it ends).
			writeError(w, r, http.StatusBadRequest, "invalid_period", "period "+period+" of board "+b.Key()+" has not begun", "")
			return
		}
		s.moderate(w, r, messages.ScoreSubmitted{Op: messages.OpAdjust, EventID: eventID, Board: b.Key(), Period: period, UserID: userID, Value: value, OccurredAt: s.Now().UTC()},
			req.Period, "entry.adjust", req.Reason, map[string]any{"value": value})
	}
}

// handleRemove answers DELETE /admin/boards/{board_id}/entries/{user_id}?period=&reason=:
// the entry is removed through the pipeline, in the history. 404 when there is none.
// Audited, with the reason when one is given (API.md names none).
func (s *server) handleRemove() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, userID, ok := s.moderatedEntry(w, r)
		if !ok {
			return
		}
		q := r.URL.Query()
		if reason := q.Get("reason"); reason != "" { // ?reason= is none, as the season start's ""
			if e := reasonOf(reason); e != nil {
				writeError(w, r, e.status, e.code, e.message, "")
				return
			}
		}
		period, ok := s.period(w, r, b)
		if !ok {
			return
		}
		// The entry is looked for in PostgreSQL, hidden ones too: a banned cheater's entry
		// is removed before the unban shows the others again.
		entries, err := s.Moderation.BanStore.Entries(r.Context(), userID)
		if err != nil {
			s.readFailed(w, r, err)
			return
		}
		if !slices.ContainsFunc(entries, func(e storage.UserEntry) bool { return e.Board == b.Key() && e.Period == period }) {
			writeError(w, r, http.StatusNotFound, "not_found", "user "+userID+" has no entry on board "+b.Key()+" period "+period, "")
			return
		}
		s.moderate(w, r, messages.ScoreSubmitted{Op: messages.OpRemove, EventID: uuid.NewString(), Board: b.Key(), Period: period, UserID: userID, OccurredAt: s.Now().UTC()},
			period, "entry.remove", q.Get("reason"), nil)
	}
}

// moderatedEntry resolves the board and user of an entry endpoint.
func (s *server) moderatedEntry(w http.ResponseWriter, r *http.Request) (configs.Board, string, bool) {
	b, ok := s.board(w, r, chi.URLParam(r, "board_id"))
	if !ok {
		return b, "", false
	}
	userID := chi.URLParam(r, "user_id")
	if !messages.ValidUserID(userID) {
		writeError(w, r, http.StatusBadRequest, "invalid_user_id", "user_id must be 1 to 64 of [A-Za-z0-9_.:-]", "")
		return b, "", false
	}
	return b, userID, true
}

// moderate makes an entry command durable with its audit record and answers: 202
// accepted, or 200 applied with wait=true once the projector applied it; a retry with the
// event id is answered the same (with the period the command was applied to), another
// command with it 409. requested is the period as the request named it.
func (s *server) moderate(w http.ResponseWriter, r *http.Request, msg messages.ScoreSubmitted, requested, action, reason string, detail map[string]any) {
	cmd, e := moderationCommand(r, msg, requested, reason)
	if e != nil {
		writeError(w, r, e.status, e.code, e.message, msg.EventID)
		return
	}
	if detail == nil {
		detail = map[string]any{}
	}
	detail["event_id"], detail["period"] = msg.EventID, msg.Period
	// Held before it is durable: from then on no best score of the user on this board
	// period is answered "unchanged" from what Redis shows until the projector mirrored it.
	var added bool
	if s.Moderation.Holds != nil {
		var err error
		if added, err = s.Moderation.Holds.Hold(r.Context(), msg.Board, msg.Period, msg.UserID, msg.EventID); err != nil {
			s.moderationFailed(w, r, err, msg.EventID)
			return
		}
	}
	audit := storage.AuditEntry{Actor: claimsFrom(r.Context()).Subject, Action: action, Target: msg.Board + "/" + msg.UserID, Reason: reason, Detail: detail}
	outcome, err := s.Moderation.Commands.AcceptWith(r.Context(), cmd, func(ctx context.Context, tx *sql.Tx) error {
		if s.Moderation.Holds != nil {
			if err := storage.MarkHoldTx(ctx, tx, msg.UserID, msg.EventID, msg.Period); err != nil {
				return err
			}
		}
		return storage.RecordAuditTx(ctx, tx, audit)
	})
	// A command not accepted now (a reused event id, or a retry of one accepted before)
	// takes its hold out when its id did not hold the user already, unless the command
	// recorded under it is an admin's command still on its way to this board period (a
	// request racing its own retry may lose the insert to it), whose hold the projector
	// takes out once it applies it. A player's write under the id, one answered unchanged,
	// or a command on another period (a retry after a reset) takes out no hold here. One
	// whose outcome is unknown (err) keeps it: it may be accepted.
	if err == nil && outcome != storage.Accepted && added && !s.pending(context.WithoutCancel(r.Context()), msg.UserID, msg.EventID, msg.Board, msg.Period) {
		if rerr := s.Moderation.Holds.Unhold(context.WithoutCancel(r.Context()), msg.Board, msg.Period, msg.UserID, msg.EventID); rerr != nil {
			s.Logger.Warn("release the hold of an admin command not accepted", "err", rerr, "board", msg.Board, "user_id", msg.UserID, "event_id", msg.EventID)
		}
	}
	switch {
	case err != nil:
		s.moderationFailed(w, r, err, msg.EventID)
		return
	case outcome == storage.Conflict:
		writeError(w, r, http.StatusConflict, "event_id_conflict", errEventIDConflict.Error(), msg.EventID)
		return
	}
	s.Logger.Info("moderation", "action", action, "target", audit.Target, "period", msg.Period, "by", audit.Actor, "reason", reason, "event_id", msg.EventID)
	if wantsWait(r) {
		var period string
		if s.poll(r.Context(), func(ctx context.Context) bool {
			a, ok, err := s.Requests.AppliedIn(ctx, msg.UserID, msg.EventID, msg.Board)
			period = a.Period
			return err == nil && ok && s.readsShow(ctx, msg, a)
		}) {
			encode(w, http.StatusOK, map[string]any{"status": "applied", "event_id": msg.EventID, "board": msg.Board, "period": period, "user_id": msg.UserID})
			return
		}
	}
	encode(w, http.StatusAccepted, map[string]any{"status": "accepted", "event_id": msg.EventID})
}

// readsShow tells whether reads show an admin's entry command PostgreSQL applied (a):
// Redis holds the entry at its version since, or (a removal, or any command on a banned
// user's entry, which reads leave out) no entry; for a period Redis does not keep,
// PostgreSQL answers. The projector writes PostgreSQL before Redis, so "applied" from
// PostgreSQL alone let a read right after still show a removed entry.
func (s *server) readsShow(ctx context.Context, msg messages.ScoreSubmitted, a storage.Applied) bool {
	b, ok := s.Config.Board(msg.Board)
	if s.Reads == nil || !ok {
		return true
	}
	cur, settled, err := s.Reads.applied(ctx, b, a.Period, msg.UserID)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return msg.Op == messages.OpRemove || settled || s.Guard.banned(msg.UserID)
	case err != nil:
		return false
	}
	return settled || (a.Version > 0 && cur.Version >= a.Version)
}

// pageParams reads ?limit= (1–500, default 50) and ?cursor= (an id from next_cursor).
func pageParams(w http.ResponseWriter, r *http.Request) (limit int, before int64, ok bool) {
	limit, ok = intParam(w, r, "limit", 50, 1, 500, "invalid_limit")
	if !ok {
		return 0, 0, false
	}
	if raw := r.URL.Query().Get("cursor"); raw != "" {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n <= 0 {
			writeError(w, r, http.StatusBadRequest, "invalid_cursor", "cursor must come from next_cursor", "")
			return 0, 0, false
		}
		before = n
	}
	return limit, before, true
}

// trailPage is one page of an admin trail, newest first; NextCursor is the last item's id,
// or null when the page was not full.
type trailPage[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

// writeTrailPage answers a page of items (never a null list); id gives an item's id.
func writeTrailPage[T any](w http.ResponseWriter, items []T, limit int, id func(T) int64) {
	page := trailPage[T]{Items: items}
	if page.Items == nil {
		page.Items = []T{}
	}
	if n := len(items); n > 0 && n >= limit {
		c := strconv.FormatInt(id(items[n-1]), 10)
		page.NextCursor = &c
	}
	encode(w, http.StatusOK, page)
}

// handleAnomalies answers GET /admin/anomalies?cursor=&limit=&user_id=&reason=: refused
// writes, newest first.
func (s *server) handleAnomalies() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		limit, before, ok := pageParams(w, r)
		if !ok {
			return
		}
		q := r.URL.Query()
		user, reason := q.Get("user_id"), q.Get("reason")
		if storableText(user) != user || storableText(reason) != reason { // matches no stored text
			writeTrailPage(w, []storage.Anomaly(nil), limit, func(a storage.Anomaly) int64 { return a.ID })
			return
		}
		items, err := s.Moderation.Anomalies.Page(r.Context(), before, limit, user, reason)
		if err != nil {
			s.moderationFailed(w, r, err, "")
			return
		}
		writeTrailPage(w, items, limit, func(a storage.Anomaly) int64 { return a.ID })
	}
}

// handleAudit answers GET /admin/audit?cursor=&limit=: every admin action, newest first.
func (s *server) handleAudit() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		limit, before, ok := pageParams(w, r)
		if !ok {
			return
		}
		items, err := s.Moderation.Audit.Page(r.Context(), before, limit)
		if err != nil {
			s.moderationFailed(w, r, err, "")
			return
		}
		writeTrailPage(w, items, limit, func(a storage.AuditRecord) int64 { return a.ID })
	}
}
