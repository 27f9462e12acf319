-- +goose Up
-- The outbox's prune, the relay's rewind and a dead letter's delete find a message's dead
-- letters by its uuid too (a message another producer put on the topic has no event id and
-- may have no user): an index keeps that a lookup, however many dead letters there are.
CREATE INDEX dead_letters_uuid ON dead_letters (uuid);

