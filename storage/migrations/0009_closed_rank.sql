-- +goose Up
-- Score changes become HOT updates: no index covers a column the projector changes.
--
-- The rank index on (sort_key, reached_at) made every changed score a new row version with
-- an insert into each of the table's three indexes, and bloated them between vacuums
-- (PostgreSQL's CPU per score at saturation: 72-74 µs with it, 61 µs without, in
-- alternating runs). Ranks of a period now come from that index only once the period is
-- closed and read from PostgreSQL: the first such read freezes the period (Ranks.freeze)
-- by copying each entry's sort_key and reached_at into closed_sort_key and
-- closed_reached_at, which the rank index covers; frozen_periods records it, so that an
-- entry written to the period later is written frozen (the projector keeps a frozen
-- entry's copy current, and leaves an open period's entries unfrozen: NULL, unchanged).
-- Reads of open periods while Redis is down sort the period's entries instead.
ALTER TABLE board_entries ADD COLUMN closed_sort_key BIGINT;
ALTER TABLE board_entries ADD COLUMN closed_reached_at TIMESTAMPTZ;
ALTER TABLE board_entries SET (fillfactor = 80);

DROP INDEX board_entries_rank;
CREATE INDEX board_entries_closed_rank ON board_entries ((board_id || ':' || period), closed_sort_key DESC, closed_reached_at ASC, user_id DESC)
    WHERE closed_sort_key IS NOT NULL AND NOT hidden;
-- The entries a freeze has left to do (all of an open period's: an entry is added here once,
-- when it is created, and its updates leave it alone).
CREATE INDEX board_entries_unfrozen ON board_entries (board_id, period) WHERE closed_sort_key IS NULL;

CREATE TABLE frozen_periods (
    board_id  TEXT        NOT NULL,
    period    TEXT        NOT NULL,
    frozen_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (board_id, period)
);

-- SELECT * of a view is expanded when it is created: recreate it with the new columns.
DROP VIEW visible_entries;
CREATE VIEW visible_entries AS SELECT * FROM board_entries WHERE NOT hidden;
