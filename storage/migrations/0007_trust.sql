-- +goose Up
-- Trust: banned users, refused writes (anomalies), moderation ops in the history.

-- A banned user's entries stay (an unban restores them) but are hidden from every read:
-- reads go through visible_entries; ranks skip hidden entries (the rank index covers
-- visible ones only).
ALTER TABLE board_entries ADD COLUMN hidden BOOLEAN NOT NULL DEFAULT false;
DROP INDEX board_entries_rank;
CREATE INDEX board_entries_rank ON board_entries ((board_id || ':' || period), sort_key DESC, reached_at ASC, user_id DESC) WHERE NOT hidden;
CREATE INDEX board_entries_user ON board_entries (user_id);
CREATE VIEW visible_entries AS SELECT * FROM board_entries WHERE NOT hidden;

CREATE TABLE user_bans (
    user_id   TEXT COLLATE "C" PRIMARY KEY,
    reason    TEXT        NOT NULL,
    banned_by TEXT        NOT NULL,
    banned_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- Bumped by every ban and unban, so API processes notice a change with one cheap read.
CREATE SEQUENCE user_bans_version;

-- Refused writes, newest kept (the service prunes beyond LEADERBOARD_ANOMALIES_KEEP).
CREATE TABLE anomalies (
    id       BIGSERIAL PRIMARY KEY,
    at       TIMESTAMPTZ NOT NULL,
    reason   TEXT        NOT NULL,
    user_id  TEXT        NOT NULL,
    board_id TEXT        NOT NULL,
    event_id TEXT        NOT NULL,
    detail   TEXT        NOT NULL
);
CREATE INDEX anomalies_user ON anomalies (user_id, id DESC);

-- Retention pruning walks the history and the request log by time.
CREATE INDEX score_history_applied ON score_history (applied_at);
CREATE INDEX score_requests_accepted ON score_requests (accepted_at);
