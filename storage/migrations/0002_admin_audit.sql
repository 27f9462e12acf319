-- +goose Up
-- Every administrative action: who, what, when, which ids.
CREATE TABLE admin_audit (
    id         BIGSERIAL PRIMARY KEY,
    actor      TEXT        NOT NULL,
    action     TEXT        NOT NULL,
    target_ids BIGINT[]    NOT NULL DEFAULT '{}',
    detail     JSONB       NOT NULL DEFAULT '{}',
    at         TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX dead_letters_topic ON dead_letters (topic, id DESC);
