-- +goose Up
-- A requeued dead letter of a message that had no uuid (another producer's) now gets one
-- of its own (storage.DeadLetterAdmin): an empty uuid names nothing in the outbox's upkeep,
-- which told such messages apart by it. Envelopes an earlier build requeued with an empty
-- uuid get one too, so that each is done once its message is dead-lettered again (they are
-- forwarded once more at the next relay start, and dead-lettered again with their uuid).
-- +goose StatementBegin
DO $$
DECLARE t text;
BEGIN
  FOR t IN SELECT tablename FROM pg_tables
           WHERE schemaname = current_schema() AND tablename ~ '^watermill_score_commands_[0-9]+$' LOOP
    EXECUTE format($q$UPDATE %I SET payload = jsonb_set(payload::jsonb, '{uuid}', to_jsonb(gen_random_uuid()::text))::json
                       WHERE payload->>'destination_topic' IS NOT NULL AND payload->>'uuid' = ''$q$, t);
  END LOOP;
END $$;
-- +goose StatementEnd
