-- +goose Up
-- Users known to the service, with the display name from their token.
CREATE TABLE users (
    user_id    TEXT PRIMARY KEY,
    nick_name  TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The current entry of each user on each board and period (derived from score_history).
CREATE TABLE board_entries (
    board_id   TEXT        NOT NULL,
    period     TEXT        NOT NULL,
    user_id    TEXT        NOT NULL,
    score      BIGINT      NOT NULL,
    version    BIGINT      NOT NULL,
    reached_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (board_id, period, user_id)
);

-- No index on score yet: reads are served by Redis, and without one updates of a
-- score stay HOT (no index churn). PostgreSQL rank queries will bring their own.

-- Append-only audit trail: one row per applied event and board; event_id makes applying idempotent.
CREATE TABLE score_history (
    seq         BIGSERIAL PRIMARY KEY,
    event_id    TEXT        NOT NULL,
    board_id    TEXT        NOT NULL,
    period      TEXT        NOT NULL,
    user_id     TEXT        NOT NULL,
    operator    TEXT        NOT NULL,
    value       BIGINT      NOT NULL,
    occurred_at TIMESTAMPTZ NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (event_id, board_id, period)
);

CREATE INDEX score_history_user ON score_history (user_id, occurred_at DESC);

-- Accepted commands, by event_id: answers client retries and detects a reused event_id.
CREATE TABLE score_requests (
    event_id    TEXT PRIMARY KEY,
    body_hash   BYTEA       NOT NULL,
    user_id     TEXT        NOT NULL,
    board_id    TEXT        NOT NULL,
    accepted_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Messages the pipeline could not process for a permanent reason (the poison queue).
CREATE TABLE dead_letters (
    id          BIGSERIAL PRIMARY KEY,
    uuid        TEXT        NOT NULL,
    event_id    TEXT,
    payload     BYTEA       NOT NULL,
    metadata    JSONB       NOT NULL DEFAULT '{}',
    reason      TEXT        NOT NULL,
    topic       TEXT        NOT NULL,
    handler     TEXT        NOT NULL,
    subscriber  TEXT        NOT NULL,
    attempts    INT         NOT NULL DEFAULT 1,
    poisoned_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX dead_letters_event ON dead_letters (event_id);
