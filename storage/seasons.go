package storage

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrSeasonExists is returned when a season of that name was started before.
var ErrSeasonExists = errors.New("season already exists")

// Season is one started season of a season board.
type Season struct {
	Board     string
	Name      string
	StartedAt time.Time
	StartedBy string
	// Previous is the season current until this one started ("" for the board's first,
	// which no admin starts); set by Start only.
	Previous string
}

// seasonStartLock serializes season starts (of every board: they are rare).
const seasonStartLock = 7_345_112_005

// Seasons keeps the seasons admins start; the latest started is the current one.
type Seasons struct {
	pool *pgxpool.Pool
}

// NewSeasons returns the season store.
func NewSeasons(pool *pgxpool.Pool) *Seasons { return &Seasons{pool: pool} }

// All returns every started season of every board, oldest first.
func (s *Seasons) All(ctx context.Context) ([]Season, error) {
	rows, err := s.pool.Query(ctx, `SELECT board_id, season, started_at, started_by FROM seasons ORDER BY started_at, season`)
	if err != nil {
		return nil, unavailable("list seasons", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Season, error) {
		var x Season
		err := r.Scan(&x.Board, &x.Name, &x.StartedAt, &x.StartedBy)
		return x, err
	})
	return out, unavailable("list seasons", err)
}

// Start starts a season of a board now, audited with its actor and reason, in one
// transaction, and tells the season it follows. Starts are serialized and
// stamped when they hold the board's lock, so the one answered last is current and each
// names the season current just before it (stamped with the transaction's start, a start
// that began first but committed last sorted before one already answered, never
// current). A name used before (the first season included, when given) is
// ErrSeasonExists.
func (s *Seasons) Start(ctx context.Context, board, name, actor, reason string) (Season, error) {
	var started Season
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(seasonStartLock)); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT season FROM seasons WHERE board_id = $1 ORDER BY started_at DESC, season DESC LIMIT 1`, board).Scan(&started.Previous)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		err = tx.QueryRow(ctx, `INSERT INTO seasons (board_id, season, started_by, started_at) VALUES ($1, $2, $3, clock_timestamp())
			RETURNING board_id, season, started_at, started_by`, board, name, actor).Scan(&started.Board, &started.Name, &started.StartedAt, &started.StartedBy)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return ErrSeasonExists
		}
		if err != nil {
			return err
		}
		args, err := AuditEntry{Actor: actor, Action: "board.season_start", Target: board + "/" + name, Reason: reason}.args()
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, insertAudit, args...)
		return err
	})
	if errors.Is(err, ErrSeasonExists) {
		return Season{}, err
	}
	return started, unavailable("start season", err)
}
