-- +goose Up
-- The history and the request log only grow (retention deletes their oldest rows), and no
-- plan on them turns on fine statistics: analyze them as they double, not at every 10 %.
-- At 8,000 scores a second the default re-analyzed each of them every 10–15 s, 0.2–0.6 s of
-- a backend's CPU at once (sampling 30,000 rows and sorting their text columns), and the
-- accept path's p99 rose in the seconds of each (the service's own maintenance, which runs
-- when autovacuum is off, reads these settings as autovacuum does).
ALTER TABLE score_history SET (autovacuum_analyze_scale_factor = 1);
ALTER TABLE score_requests SET (autovacuum_analyze_scale_factor = 1);

