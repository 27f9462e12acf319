package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BoardDefinition is what a board's entries mean: how values combine, which rank first,
// the periods they count for and the values it takes.
type BoardDefinition struct {
	ID, Operator, Order, Period string
	MinValue, MaxValue          int64
}

// boardDefinitionsLock serializes RecordBoards of processes starting together.
const boardDefinitionsLock = 7_345_112_004

// RecordBoards records the boards' definitions, refusing a change that would read a
// board's entries with other rules than they were made under: another operator, order or
// period of a board that holds entries (its own, or its matches' for a match board), or
// bounds some of them lie outside of. Another operator, order or period is refused too
// while a command waits in the outbox (accepted, neither applied nor dead-lettered): the
// projector would apply it by the new rules (an increment as a set), and the outbox does
// not say cheaply which boards its commands are for (the payload is the player's JSON,
// never read there: isEnvelope); and so is it while dead letters wait, which a requeue
// would put back there. A board without entries may change freely once no command waits;
// one recorded for the first time is taken as it is.
func RecordBoards(ctx context.Context, pool *pgxpool.Pool, outbox OutboxSchema, boards []BoardDefinition) error {
	var (
		waitingShards []int
		looked        bool
	)
	waiting := func() ([]int, error) {
		if looked {
			return waitingShards, nil
		}
		var err error
		waitingShards, err = pendingShards(ctx, pool, outbox, 0)
		looked = err == nil
		return waitingShards, err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(boardDefinitionsLock)); err != nil {
			return fmt.Errorf("record board definitions: %w", err)
		}
		for _, b := range boards {
			if err := recordBoard(ctx, tx, b, waiting); err != nil {
				return err
			}
		}
		return nil
	})
}

func recordBoard(ctx context.Context, tx pgx.Tx, b BoardDefinition, waiting func() ([]int, error)) error {
	var was BoardDefinition
	err := tx.QueryRow(ctx, `SELECT operator, sort_order, period, min_value, max_value FROM board_definitions WHERE board_id = $1`, b.ID).
		Scan(&was.Operator, &was.Order, &was.Period, &was.MinValue, &was.MaxValue)
	was.ID = b.ID
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("read the definition of board %s: %w", b.ID, err)
	case was == b:
		return nil
	default:
		// Entries of the board, or of its matches (match:{id} of a match board).
		entries := `FROM board_entries WHERE (board_id = $1 OR left(board_id, length($1) + 1) = $1 || ':')`
		if was.Operator != b.Operator || was.Order != b.Order || was.Period != b.Period {
			var held bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 `+entries+`)`, b.ID).Scan(&held); err != nil {
				return fmt.Errorf("look for entries of board %s: %w", b.ID, err)
			}
			if held {
				return fmt.Errorf("boards file: board %s holds entries made as operator %s, order %s, period %s; the file now says operator %s, order %s, period %s, which would read them with other rules: keep its definition, or define a new board id",
					b.ID, was.Operator, was.Order, was.Period, b.Operator, b.Order, b.Period)
			}
			shards, err := waiting()
			if err != nil {
				return err
			}
			if len(shards) > 0 {
				return fmt.Errorf("boards file: board %s was operator %s, order %s, period %s and the file now says operator %s, order %s, period %s, while outbox shards %v hold commands not applied yet, which would be applied by the new rules (an increment as a set): keep its definition until they are applied (stop the API processes and let the relay and projector drain the outbox), then change it",
					b.ID, was.Operator, was.Order, was.Period, b.Operator, b.Order, b.Period, shards)
			}
			// A dead letter requeued after the change would be applied by the new rules too.
			var dead bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM dead_letters)`).Scan(&dead); err != nil {
				return fmt.Errorf("look for dead letters: %w", err)
			}
			if dead {
				return fmt.Errorf("boards file: board %s was operator %s, order %s, period %s and the file now says operator %s, order %s, period %s, while dead letters wait (GET /admin/dlq), which a requeue would apply by the new rules (an increment as a set): requeue or delete them with the old definition, then change it",
					b.ID, was.Operator, was.Order, was.Period, b.Operator, b.Order, b.Period)
			}
		}
		if b.MinValue > was.MinValue || b.MaxValue < was.MaxValue {
			var outside int64
			if err := tx.QueryRow(ctx, `SELECT count(*) `+entries+` AND (score < $2 OR score > $3)`, b.ID, b.MinValue, b.MaxValue).Scan(&outside); err != nil {
				return fmt.Errorf("look for entries of board %s: %w", b.ID, err)
			}
			if outside > 0 {
				return fmt.Errorf("boards file: board %s now takes values from %d to %d, but %d of its entries lie outside (it took %d to %d): widen the bounds again, or remove those entries first",
					b.ID, b.MinValue, b.MaxValue, outside, was.MinValue, was.MaxValue)
			}
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO board_definitions (board_id, operator, sort_order, period, min_value, max_value)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (board_id) DO UPDATE SET operator = excluded.operator, sort_order = excluded.sort_order, period = excluded.period,
			min_value = excluded.min_value, max_value = excluded.max_value, recorded_at = now()`,
		b.ID, b.Operator, b.Order, b.Period, b.MinValue, b.MaxValue); err != nil {
		return fmt.Errorf("record the definition of board %s: %w", b.ID, err)
	}
	return nil
}
