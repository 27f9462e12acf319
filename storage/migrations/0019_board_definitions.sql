-- +goose Up
-- The definition each board's entries were made under (storage.RecordBoards): a board that
-- holds entries keeps its operator, order and period, and bounds its entries lie within.
CREATE TABLE IF NOT EXISTS board_definitions (
    board_id    text PRIMARY KEY,
    operator    text NOT NULL,
    sort_order  text NOT NULL,
    period      text NOT NULL,
    min_value   bigint NOT NULL,
    max_value   bigint NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
