-- +goose Up
-- The admin adjustments and removals of a board period still on their way (their request
-- log rows carry the period their hold is on, storage.MarkHoldTx; every other accepted
-- command leaves it null, and a write answered unchanged is marked so): a load of the period
-- into Redis after Redis lost it holds their users again (Ranks.pendingHolds), from this
-- small index instead of a scan of the whole request log.
CREATE INDEX IF NOT EXISTS score_requests_holds ON score_requests (board_id, period) WHERE period IS NOT NULL AND NOT unchanged;
