-- +goose Up
-- The version of every entry an admin removed, so that versions keep rising across a
-- removal: a new entry of the same user on the board period starts above it, and a
-- redelivered removal (its row already gone) can still be mirrored to Redis with it. Before
-- this a new entry started again at version 1, below the removed entry's state that Redis
-- still held when the removal's mirror had failed, and Redis kept that state.
CREATE TABLE removed_entries (
    board_id   TEXT        NOT NULL,
    period     TEXT        NOT NULL,
    user_id    TEXT COLLATE "C" NOT NULL,
    version    BIGINT      NOT NULL,
    removed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (board_id, period, user_id)
);
