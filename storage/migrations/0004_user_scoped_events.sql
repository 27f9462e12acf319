-- +goose Up
-- Event ids are scoped by user: one user's event_id never blocks another user's.
-- Existing rows keep their values; only the keys change.
ALTER TABLE score_requests DROP CONSTRAINT score_requests_pkey;
ALTER TABLE score_requests ADD PRIMARY KEY (user_id, event_id);

ALTER TABLE score_history DROP CONSTRAINT score_history_event_id_board_id_period_key;
ALTER TABLE score_history ADD CONSTRAINT score_history_event UNIQUE (user_id, event_id, board_id, period);

-- Dead letters name the user their event belongs to (the partition key), so the relay's
-- rewind and prune match (user, event id) pairs.
ALTER TABLE dead_letters ADD COLUMN user_id TEXT;
UPDATE dead_letters SET user_id = metadata->>'partition_key' WHERE user_id IS NULL;
DROP INDEX dead_letters_event;
CREATE INDEX dead_letters_event ON dead_letters (user_id, event_id);

-- Admin actions on boards and users name their target as text, with an optional reason.
ALTER TABLE admin_audit ADD COLUMN target TEXT NOT NULL DEFAULT '';
ALTER TABLE admin_audit ADD COLUMN reason TEXT NOT NULL DEFAULT '';
CREATE INDEX admin_audit_at ON admin_audit (id DESC);
