-- +goose Up
-- A best score answered "unchanged" (it does not beat the entry) is recorded with its
-- client's event id, marked unchanged: a retry is answered unchanged again and never
-- applied, the same event id with another body is 409, as for accepted writes. (Nothing
-- was recorded: another body under that event id was accepted, and a retry after the entry
-- fell below the value was applied.) A constant default adds the column without a rewrite.
ALTER TABLE score_requests ADD COLUMN unchanged BOOLEAN NOT NULL DEFAULT false;
-- Analyzed from the small sample, as the table's other columns (0010).
ALTER TABLE score_requests ALTER COLUMN unchanged SET STATISTICS 10;
