-- +goose Up
-- A dead letter records the transaction that wrote it. Outbox rows are ordered by their
-- transactions too: a dead letter speaks only of the rows written before it (the command it
-- holds, and requeues of it made before), never of a newer command that reuses its event
-- id once the request log forgot it (a delete of the old letter dropped that command's
-- row, and the relay took it for applied). The letters already here get this migration's
-- transaction, which comes after every outbox row written before it.
ALTER TABLE dead_letters ADD COLUMN IF NOT EXISTS tx xid8 NOT NULL DEFAULT pg_current_xact_id();
