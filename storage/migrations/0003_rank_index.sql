-- +goose Up
-- Rank order for reads from PostgreSQL while Redis is unavailable: higher score first,
-- then the entry that reached it first, then user id descending (as the Redis member
-- order). Keyed by the expression board_id || ':' || period so that the planner never
-- takes it for the primary-key look-ups of the projector.
CREATE INDEX board_entries_rank ON board_entries ((board_id || ':' || period), score DESC, reached_at ASC, user_id DESC);
