package http

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/openleaderboard/leaderboard/storage"
)

// DeadLetterStore is the admin view of the dead letters.
type DeadLetterStore interface {
	List(ctx context.Context, limit int, before int64) ([]storage.DeadLetter, int64, error)
	Get(ctx context.Context, id int64) (storage.DeadLetter, error)
	Requeue(ctx context.Context, id int64, actor string) error
	RequeueMatching(ctx context.Context, f storage.DeadLetterFilter, actor string) ([]int64, error)
	Delete(ctx context.Context, id int64, actor string) error
}

type deadLetterItem struct {
	ID         int64     `json:"id"`
	UUID       string    `json:"uuid"`
	EventID    string    `json:"event_id"` // "" for a message that had none (API.md lists it in every item)
	Topic      string    `json:"topic"`
	Handler    string    `json:"handler"`
	Reason     string    `json:"reason"`
	PoisonedAt time.Time `json:"poisoned_at"`
	Attempts   int       `json:"attempts"`
}

func itemOf(l storage.DeadLetter) deadLetterItem {
	return deadLetterItem{ID: l.ID, UUID: l.UUID, EventID: l.EventID, Topic: l.Topic, Handler: l.Handler, Reason: l.Reason, PoisonedAt: l.PoisonedAt, Attempts: l.Attempts}
}

func (s *server) deadLetterFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, storage.ErrNotFound) {
		writeError(w, r, http.StatusNotFound, "not_found", "no dead letter with this id", "")
		return
	}
	s.Logger.Warn("dead letter admin failed", "err", err, "request_id", requestIDFrom(r.Context()))
	writeError(w, r, http.StatusServiceUnavailable, "dependency_unavailable", "the dead-letter store is unavailable", "")
}

// deadLetterID reads the {id} path parameter; false after answering 400.
func deadLetterID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, r, http.StatusBadRequest, "invalid_id", "dead letter id must be a positive integer", "")
		return 0, false
	}
	return id, true
}

func (s *server) handleListDeadLetters() http.HandlerFunc {
	type response struct {
		Items      []deadLetterItem `json:"items"`
		NextCursor *string          `json:"next_cursor"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		limit := 50
		if raw := q.Get("limit"); raw != "" {
			n, err := strconv.Atoi(raw)
			if err != nil || n < 1 || n > 500 {
				writeError(w, r, http.StatusBadRequest, "invalid_limit", "limit must be an integer from 1 to 500", "")
				return
			}
			limit = n
		}
		var before int64
		if raw := q.Get("cursor"); raw != "" {
			n, err := strconv.ParseInt(raw, 10, 64)
			if err != nil || n <= 0 {
				writeError(w, r, http.StatusBadRequest, "invalid_cursor", "cursor must come from next_cursor", "")
				return
			}
			before = n
		}
		letters, next, err := s.DeadLetters.List(r.Context(), limit, before)
		if err != nil {
			s.deadLetterFailed(w, r, err)
			return
		}
		resp := response{Items: make([]deadLetterItem, len(letters))}
		for i, l := range letters {
			resp.Items[i] = itemOf(l)
		}
		if next > 0 {
			c := strconv.FormatInt(next, 10)
			resp.NextCursor = &c
		}
		encode(w, http.StatusOK, resp)
	}
}

func (s *server) handleGetDeadLetter() http.HandlerFunc {
	type payload struct {
		Base64 string          `json:"base64"`
		Text   *string         `json:"text,omitempty"` // when the payload is valid UTF-8
		JSON   json.RawMessage `json:"json,omitempty"` // when the payload is valid JSON
		Bytes  int             `json:"bytes"`
	}
	type response struct {
		deadLetterItem
		Subscriber string            `json:"subscriber"`
		Payload    payload           `json:"payload"`
		Metadata   map[string]string `json:"metadata"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := deadLetterID(w, r)
		if !ok {
			return
		}
		l, err := s.DeadLetters.Get(r.Context(), id)
		if err != nil {
			s.deadLetterFailed(w, r, err)
			return
		}
		p := payload{Base64: base64.StdEncoding.EncodeToString(l.Payload), Bytes: len(l.Payload)}
		if utf8.Valid(l.Payload) {
			text := string(l.Payload)
			p.Text = &text
		}
		if json.Valid(l.Payload) {
			p.JSON = l.Payload
		}
		encode(w, http.StatusOK, response{deadLetterItem: itemOf(l), Subscriber: l.Subscriber, Payload: p, Metadata: l.Metadata})
	}
}

func (s *server) handleRequeueDeadLetter() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := deadLetterID(w, r)
		if !ok {
			return
		}
		if err := s.DeadLetters.Requeue(r.Context(), id, claimsFrom(r.Context()).Subject); err != nil {
			s.deadLetterFailed(w, r, err)
			return
		}
		encode(w, http.StatusOK, map[string]any{"id": id, "status": "requeued"})
	}
}

func (s *server) handleRequeueMatching() http.HandlerFunc {
	type request struct {
		Topic          string `json:"topic"`
		ReasonContains string `json:"reason_contains"`
		Limit          *int   `json:"limit"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		var req request
		if e := decodeStrict(w, r, &req); e != nil {
			writeError(w, r, e.status, e.code, e.message, "")
			return
		}
		f := storage.DeadLetterFilter{Topic: req.Topic, ReasonContains: req.ReasonContains, Limit: 1000}
		if req.Limit != nil {
			if *req.Limit < 1 || *req.Limit > 10_000 {
				writeError(w, r, http.StatusBadRequest, "invalid_limit", "limit must be from 1 to 10000", "")
				return
			}
			f.Limit = *req.Limit
		}
		ids, err := s.DeadLetters.RequeueMatching(r.Context(), f, claimsFrom(r.Context()).Subject)
		if err != nil {
			s.deadLetterFailed(w, r, err)
			return
		}
		if ids == nil {
			ids = []int64{}
		}
		encode(w, http.StatusOK, map[string]any{"requeued": len(ids), "ids": ids})
	}
}

func (s *server) handleDeleteDeadLetter() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := deadLetterID(w, r)
		if !ok {
			return
		}
		if err := s.DeadLetters.Delete(r.Context(), id, claimsFrom(r.Context()).Subject); err != nil {
			s.deadLetterFailed(w, r, err)
			return
		}
		encode(w, http.StatusOK, map[string]any{"id": id, "status": "deleted"})
	}
}
