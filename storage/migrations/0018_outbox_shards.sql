-- +goose Up
-- The shard count API processes write the outbox with (LEADERBOARD_OUTBOX_SHARDS). A user's
-- shard depends on it, so it changes only while no command waits in the outbox
-- (storage.RecordShardCount); one row, written by the first API process to start.
CREATE TABLE IF NOT EXISTS outbox_settings (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    shards integer NOT NULL CHECK (shards > 0)
);
