package http

import (
	"net/http"
	"time"
)

// handleListBoards answers GET /v1/boards: every board with its current period, the one
// before it and when the current one ends.
func (s *server) handleListBoards() http.HandlerFunc {
	type board struct {
		ID             string     `json:"id"`
		Operator       string     `json:"operator"`
		Order          string     `json:"order"`
		Period         string     `json:"period"`
		ServerOnly     bool       `json:"server_only"`
		MinValue       int64      `json:"min_value"`
		MaxValue       int64      `json:"max_value"`
		MaxDelta       int64      `json:"max_delta,omitempty"`
		ActionCooldown int64      `json:"action_cooldown,omitempty"`
		CurrentPeriod  string     `json:"current_period"`
		PreviousPeriod string     `json:"previous_period,omitempty"`
		NextResetAt    *time.Time `json:"next_reset_at,omitempty"`
	}
	type response struct {
		Timezone string  `json:"timezone"`
		Boards   []board `json:"boards"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		resp := response{Timezone: s.Config.Timezone.String(), Boards: make([]board, 0, len(s.Config.Boards))}
		now := s.Periods.Now() // one instant: each board's current, previous and next reset agree
		for _, b := range s.Config.Boards {
			v := board{ID: b.ID, Operator: b.Operator, Order: b.Order, Period: b.Period, ServerOnly: b.ServerOnly,
				MinValue: b.MinValue, MaxValue: b.MaxValue, ActionCooldown: int64(b.ActionCooldown / time.Second)}
			if b.Operator == "incr" {
				v.MaxDelta = b.MaxDelta
			}
			cur, prev, ok, err := s.Periods.CurrentAndPrevious(r.Context(), b, now)
			if err != nil {
				s.readFailed(w, r, err)
				return
			}
			v.CurrentPeriod = cur
			if ok {
				v.PreviousPeriod = prev
			}
			if at, ok := s.Periods.NextResetAt(b, now); ok {
				at = at.UTC()
				v.NextResetAt = &at
			}
			resp.Boards = append(resp.Boards, v)
		}
		encode(w, http.StatusOK, resp)
	}
}
