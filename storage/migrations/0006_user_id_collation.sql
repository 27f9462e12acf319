-- +goose Up
-- User ids compare byte by byte, as Redis orders members: ties on value and reach time
-- rank the same in PostgreSQL (pages, degraded reads, rebuilds) as in Redis whatever the
-- database's locale ("B" < "a" in C, "a" < "B" in en_US).
ALTER TABLE users ALTER COLUMN user_id TYPE TEXT COLLATE "C";
ALTER TABLE board_entries ALTER COLUMN user_id TYPE TEXT COLLATE "C";
ALTER TABLE score_history ALTER COLUMN user_id TYPE TEXT COLLATE "C";
ALTER TABLE score_requests ALTER COLUMN user_id TYPE TEXT COLLATE "C";
ALTER TABLE dead_letters ALTER COLUMN user_id TYPE TEXT COLLATE "C";
