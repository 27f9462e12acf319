-- +goose Up
-- The outbox's prune, the relay's rewind and a dead letter's delete find a message's dead
-- letters by its uuid too (a message another producer put on the topic has no event id and
-- may have no user): an index keeps that a lookup, however many dead letters there are.
-- Messages without a uuid (another producer's) all have it empty: they are left out, so that
-- a flood of them neither fills the index nor makes PostgreSQL plan a scan of every dead
-- letter for a lookup by uuid.
CREATE INDEX dead_letters_uuid ON dead_letters (uuid) WHERE uuid <> '';

