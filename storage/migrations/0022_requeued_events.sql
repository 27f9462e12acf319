-- +goose Up
-- The commands an admin requeued from the dead letters, by user and event id: their
-- history stays while they may still be on their way (relay, broker, projector), so that
-- one applied before (a duplicate delivery's letter, or one whose Redis step failed after
-- the commit) is found applied again. The retention drops a row with the history's age.
CREATE TABLE IF NOT EXISTS requeued_events (
    user_id     TEXT COLLATE "C" NOT NULL,
    event_id    TEXT        NOT NULL,
    requeued_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, event_id)
);
CREATE INDEX IF NOT EXISTS requeued_events_at ON requeued_events (requeued_at);
