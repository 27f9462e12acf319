package http

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
	"github.com/openleaderboard/leaderboard/storage"
)

// intParam reads an integer query parameter within [lo, hi] (def when absent), answering
// 400 code otherwise.
func intParam(w http.ResponseWriter, r *http.Request, name string, def, lo, hi int, code string) (int, bool) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return def, true
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < lo || n > hi {
		writeError(w, r, http.StatusBadRequest, code, name+" must be an integer from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi), "")
		return 0, false
	}
	return n, true
}

// page is one cursor page of a board period.
type page struct {
	entries []storage.Entry
	next    *string // the cursor of the next page; nil at the end
}

// pagePeriod resolves the period a page reads: the one the request names or, when it
// names none or a relative one ("current", "previous") and its cursor continues a walk,
// the cursor's own, so that a walk started before a reset goes on listing the period it
// started on (after midnight "previous" names another day than the walk's first page).
func (s *server) pagePeriod(w http.ResponseWriter, r *http.Request, b configs.Board, raw, cursor string) (string, bool) {
	if cursor != "" && (raw == "" || periodKeyword(raw)) {
		if p, err := s.cursors.periodOf(cursor, b.Key()); err == nil {
			return p, true
		}
		// A cursor that is not this board's is refused by readPage.
	}
	return s.resolvePeriod(w, r, b, raw)
}

// readPage reads the page after ?cursor= (size entries) of a board period, answering the
// errors itself.
func (s *server) readPage(w http.ResponseWriter, r *http.Request, b configs.Board, period, cursor string, size int) (page, bool) {
	var after *storage.Position
	if cursor != "" {
		p, err := s.cursors.read(cursor, b.Key(), period)
		if err != nil {
			writeError(w, r, http.StatusBadRequest, "invalid_cursor", "cursor must be the next_cursor of a page of this board and period", "")
			return page{}, false
		}
		after = &p
	}
	es, degraded, err := s.Reads.page(r.Context(), b, period, after, size+1)
	s.markDegraded(w, degraded)
	if errors.Is(err, storage.ErrNotFound) {
		writeError(w, r, http.StatusNotFound, "unknown_board", err.Error(), "")
		return page{}, false
	}
	if err != nil {
		s.readFailed(w, r, err)
		return page{}, false
	}
	var pg page
	if len(es) > size {
		es = es[:size]
		c := s.cursors.issue(b.Key(), period, es[size-1].Position)
		pg.next = &c
	}
	pg.entries = es
	return pg, true
}

// handleEntries answers GET /v1/boards/{board_id}/entries?period=&size=&cursor=: a page of
// entries in rank order and the cursor of the next one.
func (s *server) handleEntries() http.HandlerFunc {
	type response struct {
		Board      string      `json:"board"`
		Period     string      `json:"period"`
		Entries    []entryView `json:"entries"`
		NextCursor *string     `json:"next_cursor"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := s.board(w, r, chi.URLParam(r, "board_id"))
		if !ok {
			return
		}
		size, ok := intParam(w, r, "size", 100, 1, 1000, "invalid_size")
		if !ok {
			return
		}
		cursor := r.URL.Query().Get("cursor")
		period, ok := s.pagePeriod(w, r, b, r.URL.Query().Get("period"), cursor)
		if !ok {
			return
		}
		pg, ok := s.readPage(w, r, b, period, cursor, size)
		if !ok {
			return
		}
		resp := response{Board: b.Key(), Period: period, Entries: make([]entryView, len(pg.entries)), NextCursor: pg.next}
		for i, e := range pg.entries {
			resp.Entries[i] = viewOf(e)
		}
		encode(w, http.StatusOK, resp)
	}
}

// maxFriends bounds the ids of one friends read.
const maxFriends = 100

// handleFriends answers GET /v1/boards/{board_id}/users?ids=a,b,c&period=: the named users'
// entries with their ranks on the whole board, in rank order; users without an entry are
// left out, a user named twice is listed once.
func (s *server) handleFriends() http.HandlerFunc {
	type response struct {
		Board   string      `json:"board"`
		Period  string      `json:"period"`
		Entries []entryView `json:"entries"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := s.board(w, r, chi.URLParam(r, "board_id"))
		if !ok {
			return
		}
		var ids []string
		seen := map[string]bool{}
		for _, id := range strings.Split(r.URL.Query().Get("ids"), ",") {
			if id = strings.TrimSpace(id); id == "" || seen[id] {
				continue
			}
			if !messages.ValidUserID(id) {
				writeError(w, r, http.StatusBadRequest, "invalid_ids", "ids must be user ids (1 to 64 of [A-Za-z0-9_.:-]) separated by commas, got "+strconv.Quote(id), "")
				return
			}
			seen[id] = true
			ids = append(ids, id)
		}
		if len(ids) == 0 || len(ids) > maxFriends {
			writeError(w, r, http.StatusBadRequest, "invalid_ids", "ids must name 1 to "+strconv.Itoa(maxFriends)+" users", "")
			return
		}
		period, ok := s.period(w, r, b)
		if !ok {
			return
		}
		es, degraded, err := s.Reads.users(r.Context(), b, period, ids)
		s.markDegraded(w, degraded)
		if errors.Is(err, errNoMatch) { // as every other read of a match without a point
			writeError(w, r, http.StatusNotFound, "unknown_board", err.Error(), "")
			return
		}
		if errors.Is(err, storage.ErrNotFound) { // a period without entries has no users either
			es, err = nil, nil
		}
		if err != nil {
			s.readFailed(w, r, err)
			return
		}
		resp := response{Board: b.Key(), Period: period, Entries: make([]entryView, len(es))}
		for i, e := range es {
			resp.Entries[i] = viewOf(e)
		}
		encode(w, http.StatusOK, resp)
	}
}
