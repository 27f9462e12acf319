-- +goose Up
-- Many boards: entries rank by a sort key (the value on desc boards, its negation on asc
-- ones) and may carry metadata; seasons of season boards are started by admins.
ALTER TABLE board_entries ADD COLUMN sort_key BIGINT;
UPDATE board_entries SET sort_key = score;
ALTER TABLE board_entries ALTER COLUMN sort_key SET NOT NULL;
ALTER TABLE board_entries ADD COLUMN metadata JSONB;

DROP INDEX board_entries_rank;
CREATE INDEX board_entries_rank ON board_entries ((board_id || ':' || period), sort_key DESC, reached_at ASC, user_id DESC);

ALTER TABLE score_history ADD COLUMN metadata JSONB;

CREATE TABLE seasons (
    board_id   TEXT        NOT NULL,
    season     TEXT        NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_by TEXT        NOT NULL,
    PRIMARY KEY (board_id, season)
);
CREATE INDEX seasons_started ON seasons (board_id, started_at DESC);
