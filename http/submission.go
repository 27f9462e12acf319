package http

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// CommandLog makes accepted commands durable (the SQL outbox).
type CommandLog interface {
	Accept(ctx context.Context, cmd storage.Command) (storage.AcceptOutcome, error)
}

// RequestLog tells a request seen before apart (Duplicate or Conflict; ErrNotFound when
// new) and whether an accepted event was applied.
type RequestLog interface {
	Check(ctx context.Context, userID, eventID string, hash []byte) (storage.AcceptOutcome, error)
	// RecordUnchanged records a write answered "unchanged" under its client's event id
	// (Accepted when new; else Duplicate or Conflict, whether the recorded one was answered
	// unchanged too, and the period it was answered for); WasUnchanged tells whether a
	// recorded event id was answered so, and its period.
	RecordUnchanged(ctx context.Context, userID, eventID, board, period string, hash []byte, at time.Time) (storage.AcceptOutcome, bool, string, error)
	WasUnchanged(ctx context.Context, userID, eventID string) (bool, string, error)
	IsApplied(ctx context.Context, userID, eventID string) (bool, error)
	// Pending tells whether the command recorded under the event id is an admin's command
	// still on its way to the board period, whose hold the projector will take out.
	Pending(ctx context.Context, userID, eventID, board, period string) (bool, error)
	// AppliedIn tells whether the event was applied to the board, the period it was
	// applied to (the one it was accepted for), the version of the user's entry there in
	// PostgreSQL (0 when none), and whether it was applied before its event id's row in the
	// request log was written (a retry accepted again after the event id's retention).
	AppliedIn(ctx context.Context, userID, eventID, board string) (storage.Applied, bool, error)
	// AcceptedAgo tells how long ago, by PostgreSQL's clock, the event id was recorded
	// (storage.ErrNotFound: never).
	AcceptedAgo(ctx context.Context, userID, eventID string) (time.Duration, error)
}

// ValueReads reads an entry's value from Redis without waiting for it (storage.ValueReader):
// a write starts the read before the guard decides, so that the read and the guard's rate
// limit wait together, often in one pipeline.
type ValueReads interface {
	Read(ctx context.Context, k storage.ValueKey) storage.ValueRead
}

// errEventIDConflict: the user's event id was accepted before with another body (a
// submission's error, mapped to its answer by the handler).
var errEventIDConflict = errors.New("event_id was already used with a different body")

// errUnchangedEntryGone: a retry of a write answered unchanged, whose entry is gone since
// (removed by an admin, or hidden by a ban): there is no entry to answer it with, and the
// write was never accepted (404 not_found: send the score under a new event id).
var errUnchangedEntryGone = errors.New("this event_id was answered unchanged against an entry that is gone since (removed or hidden): send the score under a new event_id")

// submission is the use case "write a value to a board": it applies the board's rules,
// fixes the period the write counts for, answers a value that changes nothing at once
// from Redis, and otherwise makes the command durable. Idempotency is decided by the
// request log, here and in the outbox alike.
type submission struct {
	reads *Reads
	// value reads an entry's value from Redis, pipelined with other requests' commands
	// (nil: through reads, one round trip each).
	value    ValueReads
	periods  *Periods
	commands CommandLog
	requests RequestLog
	now      func() time.Time
}

// submit is one write: who, where, what, and whether the client chose the event id.
type submit struct {
	Board configs.Board
	// Also are more boards the same value counts for, once each (a match point feeds the
	// day and the season too).
	Also          []configs.Board
	UserID        string
	NickName      string
	EventID       string
	ClientEventID bool
	Value         int64
	Metadata      json.RawMessage
	CorrelationID string
}

// submitted says what became of a write: Outcome is Accepted or Duplicate, or 0 with
// Unchanged set and the user's current entry. At is when it was accepted, Period the
// period it counts for.
type submitted struct {
	Outcome   storage.AcceptOutcome
	Unchanged bool
	// Retry: an unchanged answer to a retry (its event id was answered unchanged before).
	Retry  bool
	Entry  storage.Entry
	Period string
	At     time.Time
}

// prepared is a write with its instant and periods fixed and, for a best score, the
// entry's value on its way from Redis.
type prepared struct {
	submit
	at     time.Time
	period string
	also   []messages.BoardValue
	// value is the entry's value being read (nil: no value reader; the whole entry is read).
	value *storage.ValueRead
}

// Prepare fixes when a write happens and which periods it counts for, and starts reading
// the value a best score is compared with ("unchanged?"), so that the read waits together
// with the guard's rate limit, often in one pipeline. The write's value is within its
// boards' bounds (the handler refused it otherwise). Its errors are a dependency's.
func (s submission) Prepare(ctx context.Context, w submit) (prepared, error) {
	p := prepared{submit: w, at: s.now().UTC()}
	var err error
	// One reading of the clock: the write's time and its periods agree, at midnight too.
	if p.period, err = s.periods.WriteAt(ctx, w.Board, p.at); err != nil {
		return prepared{}, err
	}
	p.also = make([]messages.BoardValue, len(w.Also))
	for i, b := range w.Also {
		period, err := s.periods.WriteAt(ctx, b, p.at)
		if err != nil {
			return prepared{}, err
		}
		p.also[i] = messages.BoardValue{Board: b.Key(), Period: period, Value: w.Value}
	}
	if s.value != nil && w.mayBeUnchanged() {
		read := s.value.Read(ctx, storage.ValueKey{Board: w.Board.Key(), Period: p.period, UserID: w.UserID})
		p.value = &read
	}
	return p, nil
}

// Submit decides a prepared write. Its errors are errEventIDConflict or a dependency's
// (wrapping storage.ErrUnavailable).
func (s submission) Submit(ctx context.Context, p prepared) (submitted, error) {
	w, at, period, also := p.submit, p.at, p.period, p.also
	hash := bodyHash(w)

	// A value that leaves the entry as it is changes nothing: answer from Redis. When Redis
	// cannot answer, the command is accepted and the projector decides.
	if w.mayBeUnchanged() && p.valueMayBeUnchanged(ctx) {
		if cur, err := s.reads.fast(ctx, w.Board, period, w.UserID); err == nil && w.Board.Unchanged(cur.Score, w.Value) {
			if !w.ClientEventID {
				return submitted{Unchanged: true, Entry: cur, Period: period, At: at}, nil
			}
			// The client's event id is recorded as answered unchanged, so that a retry is
			// answered so again and never applied, and another body under it is 409; a
			// retry of an accepted write is answered as the first time.
			seen, unchanged, was, err := s.requests.RecordUnchanged(ctx, w.UserID, w.EventID, w.Board.Key(), period, hash, at)
			switch {
			case err != nil:
				return submitted{}, err
			case seen == storage.Conflict:
				return submitted{}, errEventIDConflict
			case unchanged && (was == "" || was == period):
				return submitted{Unchanged: true, Retry: seen == storage.Duplicate, Entry: cur, Period: period, At: at}, nil
			case unchanged: // a retry after a reset: answered for the period it was made in
				return s.againUnchanged(ctx, w, was, at)
			}
			return outcome(seen, period, at)
		}
	}

	cmd := messages.ScoreSubmitted{
		EventID: w.EventID, Board: w.Board.Key(), Period: period, UserID: w.UserID,
		NickName: w.NickName, Value: w.Value, Also: also, Metadata: w.Metadata, OccurredAt: at,
	}
	msg, err := commandMessage(cmd, w.CorrelationID)
	if err != nil {
		return submitted{}, err
	}
	seen, err := s.commands.Accept(ctx, storage.Command{EventID: w.EventID, UserID: w.UserID, Board: w.Board.Key(), BodyHash: hash, Msg: msg})
	if err != nil {
		return submitted{}, err
	}
	// The retry of a write answered unchanged (the entry fell below its value since, or
	// Redis could not tell, or the period was reset since) is answered unchanged again,
	// with the entry as it is in the period the write was made in.
	if seen == storage.Duplicate && w.mayBeUnchanged() && w.ClientEventID {
		switch was, made, err := s.requests.WasUnchanged(ctx, w.UserID, w.EventID); {
		case err != nil: // it may have been: not told "accepted"
			return submitted{}, err
		case was:
			return s.againUnchanged(ctx, w, cmp.Or(made, period), at)
		}
	}
	return outcome(seen, period, at)
}

// againUnchanged answers the retry of a write answered unchanged, in the period it was
// made in, with the entry as it is there: from Redis, or from PostgreSQL while Redis is
// down (such a write was never accepted, so it is never answered 202; when neither
// answers, the error wraps storage.ErrUnavailable and the client retries). An entry
// removed since is errUnchangedEntryGone.
func (s submission) againUnchanged(ctx context.Context, w submit, period string, at time.Time) (submitted, error) {
	cur, _, err := s.reads.answered(ctx, w.Board, period, w.UserID)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return submitted{}, errUnchangedEntryGone
	case err != nil && !errors.Is(err, storage.ErrUnavailable):
		err = fmt.Errorf("%w: %w", storage.ErrUnavailable, err)
	}
	if err != nil {
		return submitted{}, err
	}
	return submitted{Unchanged: true, Retry: true, Entry: cur, Period: period, At: at}, nil
}

// Seen tells whether the request log holds the write's event id (the client's own) from
// an earlier request: a retry, which is answered as the first time (or 409) even when the
// rate limit would refuse a new write; same when with this body (not a 409). False when
// the log cannot tell.
func (s submission) Seen(ctx context.Context, p prepared) (seen, same bool) {
	if !p.ClientEventID {
		return false, false
	}
	outcome, err := s.requests.Check(ctx, p.UserID, p.EventID, bodyHash(p.submit))
	return err == nil, err == nil && outcome == storage.Duplicate
}

// mayBeUnchanged tells whether the write can leave its entry as it is at all: a best score
// on one board (an increment always changes it; a match point feeds more boards).
func (w submit) mayBeUnchanged() bool {
	return w.Board.Operator == configs.OpBest && len(w.Also) == 0
}

// valueMayBeUnchanged tells from the entry's value alone (read ahead, pipelined) whether
// the write may leave it as it is; only then is the whole entry read, for the answer's rank.
func (p prepared) valueMayBeUnchanged(ctx context.Context) bool {
	if p.value == nil {
		return true
	}
	v, err := p.value.Wait(ctx)
	return err == nil && v.OK && p.Board.Unchanged(v.Score, p.Value)
}

func outcome(seen storage.AcceptOutcome, period string, at time.Time) (submitted, error) {
	if seen == storage.Conflict {
		return submitted{}, errEventIDConflict
	}
	return submitted{Outcome: seen, Period: period, At: at}, nil
}

// WaitApplied polls until the projection applied the event and Redis shows it (PostgreSQL
// is written before Redis; for a period Redis no longer keeps, PostgreSQL), or ctx ends; it returns the entry and the period the event was
// applied to. Redis shows it when its entry is at least as new as PostgreSQL's once the
// event was applied (by version) and reflects the value: an update time alone cannot tell
// an increment from the user's previous one accepted in the same microsecond. A retry of
// an accepted write (Duplicate) carries the retry's time, not the write's: the version
// alone tells it (an increment's entry changed before it); and its period is the one the
// write was accepted for, which a retry after a reset does not resolve to.
func (s submission) WaitApplied(ctx context.Context, w submit, res submitted) (storage.Entry, string, bool) {
	delay := 5 * time.Millisecond
	for {
		if a, ok, err := s.requests.AppliedIn(ctx, w.UserID, w.EventID, w.Board.Key()); err == nil && ok {
			if a.BeforeAcceptance && a.Value != w.Value {
				// Another value under an event id the request log forgot: the projector
				// skips it (the history holds the event id), so it is never applied, and
				// no later write of the user's makes it so.
				return storage.Entry{}, "", false
			}
			// A retry, also one accepted again after its event id's retention, was applied
			// before: the entry need not have changed since its acceptance.
			retry := res.Outcome == storage.Duplicate || a.BeforeAcceptance
			cur, settled, err := s.reads.applied(ctx, w.Board, a.Period, w.UserID)
			if err == nil && (settled || cur.Version >= a.Version) && (retry || w.Board.Reflects(cur.Score, cur.UpdatedAt, w.Value, res.At)) {
				return cur, a.Period, true
			}
		}
		select {
		case <-ctx.Done():
			return storage.Entry{}, "", false
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// bodyHash is what makes two writes of a user with one event id the same request: the
// board, the value and the metadata (not the period, which the server decides: a retry
// after a reset is still the same request).
func bodyHash(w submit) []byte {
	boards := w.Board.Key()
	for _, b := range w.Also {
		boards += "+" + b.Key()
	}
	h := sha256.Sum256(fmt.Appendf(nil, "%s|%s|%d|%s", boards, w.UserID, w.Value, w.Metadata))
	return h[:]
}

// commandMessage is the outbox message of a command: UUID = event id, JSON payload, and
// the metadata the relay and projector use.
func commandMessage(cmd messages.ScoreSubmitted, correlationID string) (*message.Message, error) {
	body, err := messages.EncodeScoreSubmitted(cmd)
	if err != nil {
		return nil, fmt.Errorf("marshal command: %w", err)
	}
	msg := message.NewMessage(cmd.EventID, body)
	msg.Metadata.Set(messages.MetaEventID, cmd.EventID)
	msg.Metadata.Set(messages.MetaPartitionKey, cmd.UserID)
	middleware.SetCorrelationID(correlationID, msg)
	return msg, nil
}
