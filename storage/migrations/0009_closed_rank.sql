-- +goose Up
-- Score changes become HOT updates: no index covers a column the projector changes.
--
-- The rank index on (sort_key, reached_at) made every changed score a new row version with
-- an insert into each of the table's three indexes, and bloated them between vacuums
-- (PostgreSQL's CPU per score at saturation: 72 and 70 µs with it, 59 and 57 with this, in
-- alternating runs). Ranks of a period now come from an index only once the period is
-- closed and read from PostgreSQL: a read that finds entries of it not frozen starts a
-- freeze in the background (Ranks.Freeze), which copies each entry's sort_key and
-- reached_at into closed_sort_key and closed_reached_at, the columns the rank index
-- covers, and the read sorts the period meanwhile. The projector keeps a frozen entry's
-- copy current and leaves an unfrozen one's NULL (unchanged, so the update is HOT); an
-- entry created in a frozen period starts unfrozen and the next read freezes it.
-- Reads of open periods while Redis is down sort the period's entries.
ALTER TABLE board_entries ADD COLUMN closed_sort_key BIGINT;
ALTER TABLE board_entries ADD COLUMN closed_reached_at TIMESTAMPTZ;
ALTER TABLE board_entries SET (fillfactor = 80);

DROP INDEX board_entries_rank;
CREATE INDEX board_entries_closed_rank ON board_entries ((board_id || ':' || period), closed_sort_key DESC, closed_reached_at ASC, user_id DESC)
    WHERE closed_sort_key IS NOT NULL AND NOT hidden;
-- The entries a freeze has left to do (all of an open period's: an entry is added here once,
-- when it is created, and its updates leave it alone).
CREATE INDEX board_entries_unfrozen ON board_entries (board_id, period) WHERE closed_sort_key IS NULL;

-- SELECT * of a view is expanded when it is created: recreate it with the new columns.
DROP VIEW visible_entries;
CREATE VIEW visible_entries AS SELECT * FROM board_entries WHERE NOT hidden;
