-- +goose NO TRANSACTION
-- +goose Up
-- The admin adjustments and removals of a board period still on their way (their request
-- log rows carry the period their hold is on, storage.MarkHoldTx; every other accepted
-- command leaves it null, and a write answered unchanged is marked so): a load of the period
-- into Redis after Redis lost it holds their users again (Ranks.pendingHolds), from this
-- small index instead of a scan of the whole request log.
--
-- Built CONCURRENTLY, outside a transaction: every accepted write inserts into
-- score_requests, and a plain CREATE INDEX stopped them all for the whole build (a minute
-- or more on a week of event ids at 1,000 writes a second), and for as long as it waited
-- behind a vacuum of the table (found by a review of the upgrade path). A build that failed
-- midway leaves an invalid index, which IF NOT EXISTS would keep: it is dropped first (the
-- migration is recorded only once it succeeded, so there is no valid one to drop).
DROP INDEX CONCURRENTLY IF EXISTS score_requests_holds;
CREATE INDEX CONCURRENTLY score_requests_holds ON score_requests (board_id, period) WHERE period IS NOT NULL AND NOT unchanged;
