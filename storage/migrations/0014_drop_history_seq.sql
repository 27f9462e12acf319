-- +goose Up
-- Nothing reads score_history's seq: it goes, with its primary key index (an entry and a
-- WAL record for every row). The retention deletes keep their B-trees on applied_at and
-- accepted_at: a BRIN index, tried, stops finding old rows cheaply once deleted rows' pages
-- take new ones (its page-range summaries only widen).
ALTER TABLE score_history DROP COLUMN seq;
