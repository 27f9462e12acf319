-- +goose Up
-- A write answered "unchanged" keeps the period it was answered for: a retry after a reset
-- (a new day, week or season) is answered unchanged again for that period, not for the
-- current one (it was answered for the current one, or 202 for a command never to be
-- applied when the player had no entry there). An admin's adjustment or removal keeps the
-- period its hold is on (storage.MarkHoldTx); other accepted commands leave it null (the
-- history keeps their period). A nullable column without a default is added without a
-- rewrite.
ALTER TABLE score_requests ADD COLUMN period TEXT;
ALTER TABLE score_requests ALTER COLUMN period SET STATISTICS 10;
