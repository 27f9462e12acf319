-- +goose Up
-- No statement reads score_history by user and time: lookups by user and event id use the
-- unique index score_history_event (user_id, event_id, board_id, period). Each history row
-- paid for this index on insert (one of every score's index writes).
DROP INDEX IF EXISTS score_history_user;
