package http

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/storage"
)

// BoardMaintenance rebuilds Redis boards from PostgreSQL and compares the two, writing
// each run to the audit trail.
type BoardMaintenance interface {
	Rebuild(ctx context.Context, actor string, t storage.Target) (storage.RebuildResult, error)
	CheckConsistency(ctx context.Context, actor string, t storage.Target, full bool, sample int) (storage.ConsistencyReport, error)
}

// redisPeriod resolves the board period an admin names for Redis maintenance: only
// periods Redis keeps can be rebuilt or compared (older ones are read from PostgreSQL).
func (s *server) redisPeriod(w http.ResponseWriter, r *http.Request, b configs.Board) (storage.Target, bool) {
	period, ok := s.period(w, r, b)
	if !ok {
		return storage.Target{}, false
	}
	ttl, hot, err := s.Periods.InRedis(r.Context(), b, period)
	if err != nil {
		s.readFailed(w, r, err)
		return storage.Target{}, false
	}
	if !hot {
		writeError(w, r, http.StatusBadRequest, "period_not_in_redis", "period "+period+" of board "+b.Key()+" is not kept in Redis: reads of it come from PostgreSQL", "")
		return storage.Target{}, false
	}
	if b.Period == configs.PeriodMatch && s.Reads != nil {
		// A match exists from its first point, for maintenance as for reads: a rebuild of
		// one never played would write its keys, and every read would then find it.
		switch ok, err := s.Reads.loader.Exists(r.Context(), b.Key(), period); {
		case err != nil:
			s.readFailed(w, r, err)
			return storage.Target{}, false
		case !ok:
			writeError(w, r, http.StatusNotFound, "unknown_board", "match "+b.Match+" has no entry: "+errNoMatch.Error(), "")
			return storage.Target{}, false
		}
	}
	return storage.Target{Board: b.Key(), Period: period, TTL: ttl}, true
}

func (s *server) handleRebuild() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := s.board(w, r, chi.URLParam(r, "board_id"))
		if !ok {
			return
		}
		t, ok := s.redisPeriod(w, r, b)
		if !ok {
			return
		}
		actor := claimsFrom(r.Context()).Subject
		res, err := s.Maintenance.Rebuild(context.WithoutCancel(r.Context()), actor, t)
		if errors.Is(err, storage.ErrRebuildRunning) {
			writeError(w, r, http.StatusConflict, "rebuild_in_progress", "a rebuild of this board period is already running; retry when it ends", "")
			return
		}
		if err != nil {
			s.readFailed(w, r, err)
			return
		}
		s.Logger.Info("board rebuilt", "board", t.Board, "period", t.Period, "entries", res.Entries, "version", res.Version, "took", res.Duration, "by", actor)
		if s.Hub != nil { // this process's streams get the repaired top now, others' at their next refresh
			if err := s.Hub.Refresh(context.WithoutCancel(r.Context()), t.Board, t.Period); err != nil {
				s.Logger.Warn("rebuilt board not pushed to this process's streams", "board", t.Board, "period", t.Period, "err", err)
			}
		}
		encode(w, http.StatusOK, map[string]any{"board": res.Board, "period": res.Period, "entries": res.Entries,
			"version": res.Version, "took_ms": res.Duration.Milliseconds()})
	}
}

func (s *server) handleConsistency() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		id := q.Get("board")
		if id == "" {
			id = globalBoard
		}
		b, ok := s.board(w, r, id)
		if !ok {
			return
		}
		full := q.Get("mode") == "full"
		if m := q.Get("mode"); m != "" && m != "full" && m != "sample" {
			writeError(w, r, http.StatusBadRequest, "invalid_mode", "mode must be full or sample", "")
			return
		}
		sample := 1000
		if raw := q.Get("sample"); raw != "" {
			n, err := strconv.Atoi(raw)
			if err != nil || n < 1 || n > 100_000 {
				writeError(w, r, http.StatusBadRequest, "invalid_sample", "sample must be from 1 to 100000", "")
				return
			}
			sample = n
		}
		t, ok := s.redisPeriod(w, r, b)
		if !ok {
			return
		}
		rep, err := s.Maintenance.CheckConsistency(r.Context(), claimsFrom(r.Context()).Subject, t, full, sample)
		if err != nil {
			s.readFailed(w, r, err)
			return
		}
		encode(w, http.StatusOK, rep)
	}
}

// handleStartSeason answers POST /admin/boards/{board_id}/seasons {"season", "reason"?}:
// the board's current season becomes the new one; the previous stays readable.
func (s *server) handleStartSeason() http.HandlerFunc {
	type request struct {
		Season string `json:"season"`
		Reason string `json:"reason"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := s.board(w, r, chi.URLParam(r, "board_id"))
		if !ok {
			return
		}
		if b.Period != configs.PeriodSeason {
			writeError(w, r, http.StatusBadRequest, "not_a_season_board", "board "+b.Key()+" has "+b.Period+" periods, not seasons", "")
			return
		}
		var req request
		if e := decodeStrict(w, r, &req); e != nil {
			writeError(w, r, e.status, e.code, e.message, "")
			return
		}
		if !configs.ValidSeason(req.Season) || periodKeyword(req.Season) {
			writeError(w, r, http.StatusBadRequest, "invalid_season", "season must be 1 to 32 of [A-Za-z0-9_.-], and not current or previous (which ?period= reads as the board's current and previous seasons)", "")
			return
		}
		if req.Reason != "" {
			if e := reasonOf(req.Reason); e != nil {
				writeError(w, r, e.status, e.code, e.message, "")
				return
			}
		}
		if req.Season == configs.FirstSeason {
			writeError(w, r, http.StatusConflict, "season_exists", "season "+configs.FirstSeason+" is the first season of every season board", "")
			return
		}
		started, err := s.Periods.StartSeason(r.Context(), b, req.Season, claimsFrom(r.Context()).Subject, req.Reason)
		if errors.Is(err, storage.ErrSeasonExists) {
			writeError(w, r, http.StatusConflict, "season_exists", "board "+b.Key()+" already had a season "+strconv.Quote(req.Season), "")
			return
		}
		if err != nil {
			s.readFailed(w, r, err)
			return
		}
		previous := started.Previous
		if previous == "" {
			previous = configs.FirstSeason
		}
		s.Logger.Info("season started", "board", b.Key(), "season", started.Name, "previous", previous, "by", started.StartedBy)
		if s.Hub != nil { // this process's streams of the board move to it now (others at their next wake)
			s.Hub.Wake(b.Key())
		}
		encode(w, http.StatusCreated, map[string]any{"board": b.Key(), "season": started.Name, "previous_season": previous,
			"started_at": started.StartedAt.UTC(), "started_by": started.StartedBy})
	}
}
