-- +goose Up
-- A requeued dead letter of a message that had no uuid (another producer's) now gets one
-- of its own (storage.DeadLetterAdmin): an empty uuid names nothing in the outbox's upkeep,
-- which told such messages apart by it. Envelopes an earlier build requeued with an empty
-- uuid get one too, so that each is done once its message is dead-lettered again (they are
-- forwarded once more at the next relay start, and dead-lettered again with their uuid).
-- Rows are picked by their text, and a row PostgreSQL's JSON operators cannot read (an
-- earlier build let a \u0000 into a command's metadata) is left as it is.
-- +goose StatementBegin
DO $$
DECLARE
  t text;
  r record;
BEGIN
  FOR t IN SELECT tablename FROM pg_tables
           WHERE schemaname = current_schema() AND tablename ~ '^watermill_score_commands_[0-9]+$' LOOP
    FOR r IN EXECUTE format($q$SELECT ctid FROM %I WHERE payload::text LIKE '%%"destination_topic"%%' AND payload::text ~ '"uuid"\s*:\s*""'$q$, t) LOOP
      BEGIN
        EXECUTE format($q$UPDATE %I SET payload = jsonb_set(payload::jsonb, '{uuid}', to_jsonb(gen_random_uuid()::text))::json
                           WHERE ctid = $1 AND payload->>'destination_topic' IS NOT NULL AND payload->>'uuid' = ''$q$, t) USING r.ctid;
      EXCEPTION WHEN others THEN
        NULL;
      END;
    END LOOP;
  END LOOP;
END $$;
-- +goose StatementEnd

-- An earlier build stored another producer's poison_attempts header as it came: a count of
-- 0 or below is 1 (a requeue reads its envelope's as 0, and the message dead-lettered again
-- must have more).
UPDATE dead_letters SET attempts = 1 WHERE attempts < 1;
