-- +goose Up
-- The history and the request log only grow (retention deletes their oldest rows), and no
-- plan on them turns on fine statistics (lookups are by unique key, retention by time):
-- analyze them as they double, not at every 10 %, from a sample of 3,000 rows, not 30,000.
-- At 8,000 scores a second the defaults re-analyzed each of them every 10-15 s, 0.2-0.8 s
-- per analyze in the statement log (a 30,000-row sample read from as many pages, each text
-- column sorted), and the accept path's p99 rose in the seconds of each. (The service's own
-- maintenance, which runs when autovacuum is off, reads these settings as autovacuum does.)
ALTER TABLE score_history SET (autovacuum_analyze_scale_factor = 1);
ALTER TABLE score_requests SET (autovacuum_analyze_scale_factor = 1);
ALTER TABLE score_history
    ALTER COLUMN seq SET STATISTICS 10, ALTER COLUMN event_id SET STATISTICS 10,
    ALTER COLUMN board_id SET STATISTICS 10, ALTER COLUMN period SET STATISTICS 10,
    ALTER COLUMN user_id SET STATISTICS 10, ALTER COLUMN operator SET STATISTICS 10,
    ALTER COLUMN value SET STATISTICS 10, ALTER COLUMN occurred_at SET STATISTICS 10,
    ALTER COLUMN applied_at SET STATISTICS 10, ALTER COLUMN metadata SET STATISTICS 10;
ALTER TABLE score_requests
    ALTER COLUMN event_id SET STATISTICS 10, ALTER COLUMN body_hash SET STATISTICS 10,
    ALTER COLUMN user_id SET STATISTICS 10, ALTER COLUMN board_id SET STATISTICS 10,
    ALTER COLUMN accepted_at SET STATISTICS 10;
