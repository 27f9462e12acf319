package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// boardFile is the shape of LEADERBOARD_BOARDS_FILE (YAML, or JSON, which YAML reads too):
// {"boards": [{"id", "operator", "order"?, "period", "min_value"?, "max_value"?,
// "max_delta"?, "server_only"?, "action_cooldown"? (seconds), "match_points"?,
// "rate_limit"? ("N/duration" per user)}]}.
type boardFile struct {
	Boards []boardDef `yaml:"boards"`
}

type boardDef struct {
	ID             string `yaml:"id"`
	Operator       string `yaml:"operator"`
	Order          string `yaml:"order"`
	Period         string `yaml:"period"`
	MinValue       *int64 `yaml:"min_value"`
	MaxValue       *int64 `yaml:"max_value"`
	MaxDelta       *int64 `yaml:"max_delta"`
	ServerOnly     bool   `yaml:"server_only"`
	ActionCooldown *int64 `yaml:"action_cooldown"`
	MatchPoints    *bool  `yaml:"match_points"`
	RateLimit      string `yaml:"rate_limit"`
}

// ParseBoards reads board definitions. Every error names the board and the field.
func ParseBoards(raw []byte) ([]Board, error) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var f boardFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty; want {\"boards\": [...]}")
		}
		return nil, fmt.Errorf("not a boards file: %w", err)
	}
	if len(f.Boards) == 0 {
		return nil, errors.New(`no boards: want {"boards": [{"id": ..., "operator": ..., "period": ...}]}`)
	}
	seen := map[string]bool{}
	boards := make([]Board, 0, len(f.Boards))
	for i, d := range f.Boards {
		name := fmt.Sprintf("board %d", i+1)
		if d.ID != "" {
			name = fmt.Sprintf("board %q", d.ID)
		}
		b, err := d.board()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if seen[b.ID] {
			return nil, fmt.Errorf("%s: id: defined twice", name)
		}
		if err := endpointShape(b); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		seen[b.ID] = true
		boards = append(boards, b)
	}
	// Match points (POST /v1/matches/{match_id}/users/{user_id}/point) add to the first
	// match board; another one may keep, say, the best of a match.
	for _, b := range boards {
		if b.Period == PeriodMatch {
			if b.Operator != OpIncr {
				return nil, fmt.Errorf("board %q: operator: %q: match points add to the first board of period match: want incr", b.ID, b.Operator)
			}
			break
		}
	}
	return boards, nil
}

// endpointShape checks a board an endpoint names by its id (when the file defines it) for
// what that endpoint relies on: POST /v1/scores sends best scores to global, the
// increments add to points, the seed-004 endpoints read daily and season as days and
// seasons, and match points write match:{id} boards.
func endpointShape(b Board) error {
	switch {
	case b.ID == "global" && b.Operator != OpBest:
		return fmt.Errorf("operator: %q: POST /v1/scores sends best scores to it: want best", b.Operator)
	case b.ID == "points" && b.Operator != OpIncr:
		return fmt.Errorf("operator: %q: POST /v1/scores/increment adds to it: want incr", b.Operator)
	case b.ID == "daily" && b.Period != PeriodDaily:
		return fmt.Errorf("period: %q: /v1/daily-leaderboard reads it by day: want daily", b.Period)
	case b.ID == "season" && b.Period != PeriodSeason:
		return fmt.Errorf("period: %q: /v1/season-leaderboard reads it by season: want season", b.Period)
	case b.ID == "match" && b.Period != PeriodMatch:
		return fmt.Errorf("period: %q: match points write it as match:{match_id}: want match", b.Period)
	}
	return nil
}

func (d boardDef) board() (Board, error) {
	b := Board{ID: d.ID, Operator: d.Operator, Order: d.Order, Period: d.Period, ServerOnly: d.ServerOnly,
		MinValue: 0, MaxValue: MaxExactScore}
	// API.md: a match point adds to match:{match_id}, daily and season. A file in API.md's
	// shape (no match_points key) keeps that: its incr boards daily and season take match
	// points unless they say match_points: false; any other board only with true.
	b.MatchPoints = (b.ID == "daily" || b.ID == "season") && b.Operator == OpIncr
	if d.MatchPoints != nil {
		b.MatchPoints = *d.MatchPoints
	}
	if b.Order == "" {
		b.Order = OrderDesc
	}
	if d.MinValue != nil {
		b.MinValue = *d.MinValue
	}
	if d.MaxValue != nil {
		b.MaxValue = *d.MaxValue
	}
	if b.Operator == OpIncr {
		b.MaxDelta = b.MaxValue
	}
	if d.MaxDelta != nil {
		b.MaxDelta = *d.MaxDelta
	}
	if d.ActionCooldown != nil {
		b.ActionCooldown = time.Duration(*d.ActionCooldown) * time.Second
	}
	if d.RateLimit != "" {
		r, err := ParseRate(d.RateLimit)
		if err != nil {
			return b, fmt.Errorf("rate_limit: %w", err)
		}
		b.RateLimit = r
	}
	switch {
	case !ValidBoardID(b.ID):
		return b, fmt.Errorf("id: %q: want 1 to 32 of [A-Za-z0-9_.-]", b.ID)
	case b.Operator != OpBest && b.Operator != OpIncr && b.Operator != OpSet:
		return b, fmt.Errorf("operator: %q: want best, incr or set", b.Operator)
	case b.Order != OrderDesc && b.Order != OrderAsc:
		return b, fmt.Errorf("order: %q: want desc or asc", b.Order)
	case !oneOf(b.Period, PeriodAllTime, PeriodDaily, PeriodWeekly, PeriodSeason, PeriodMatch):
		return b, fmt.Errorf("period: %q: want all_time, daily, weekly, season or match", b.Period)
	case b.MinValue < -MaxExactScore:
		return b, fmt.Errorf("min_value: %d: want at least -%d (values are exact in Redis up to 2^53)", b.MinValue, MaxExactScore)
	case b.MaxValue > MaxExactScore:
		return b, fmt.Errorf("max_value: %d: want at most %d (values are exact in Redis up to 2^53)", b.MaxValue, MaxExactScore)
	case b.MinValue > b.MaxValue:
		return b, fmt.Errorf("min_value: %d is above max_value %d", b.MinValue, b.MaxValue)
	case d.MaxDelta != nil && b.Operator != OpIncr:
		return b, fmt.Errorf("max_delta: only incr boards take deltas")
	case b.Operator == OpIncr && b.MaxDelta < 1:
		return b, fmt.Errorf("max_delta: %d: want at least 1", b.MaxDelta)
	case d.ActionCooldown != nil && (*d.ActionCooldown < 0 || *d.ActionCooldown > 7*24*3600):
		return b, fmt.Errorf("action_cooldown: %d: want seconds from 0 to 604800", *d.ActionCooldown)
	case d.ActionCooldown != nil && b.Operator != OpIncr:
		return b, fmt.Errorf("action_cooldown: only incr boards take actions")
	case b.MatchPoints && (b.Operator != OpIncr || b.Period == PeriodMatch):
		return b, fmt.Errorf("match_points: only incr boards other than the match board add up match points")
	}
	return b, nil
}

// ValidBoardID reports whether s can be a board id: 1–32 of [A-Za-z0-9_.-] (no ':', which
// separates a match board's id from its match id).
func ValidBoardID(s string) bool {
	return len(s) >= 1 && len(s) <= 32 && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == ""
}

// ValidMatchID reports whether s can be a match id: 1–64 of [A-Za-z0-9_.-].
func ValidMatchID(s string) bool {
	return len(s) >= 1 && len(s) <= 64 && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == ""
}

func oneOf(s string, options ...string) bool {
	for _, o := range options {
		if s == o {
			return true
		}
	}
	return false
}
