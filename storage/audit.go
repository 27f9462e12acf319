package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AuditEntry is one administrative action: who did what to which target, and why.
type AuditEntry struct {
	Actor  string
	Action string // e.g. board.rebuild, dlq.requeue
	Target string // e.g. "global/all_time", a user id
	Reason string
	IDs    []int64 // ids the action touched (dead letters)
	Detail map[string]any
}

const insertAudit = `INSERT INTO admin_audit (actor, action, target, reason, target_ids, detail) VALUES ($1, $2, $3, $4, $5, $6)`

func (e AuditEntry) args() ([]any, error) {
	detail := e.Detail
	if detail == nil {
		detail = map[string]any{}
	}
	d, err := json.Marshal(detail)
	if err != nil {
		return nil, fmt.Errorf("audit detail: %w", err)
	}
	ids := e.IDs
	if ids == nil {
		ids = []int64{}
	}
	return []any{e.Actor, e.Action, e.Target, e.Reason, ids, d}, nil
}

// AuditLog writes administrative actions that are not part of a larger transaction.
type AuditLog struct {
	pool *pgxpool.Pool
}

// NewAuditLog returns the audit trail in PostgreSQL.
func NewAuditLog(pool *pgxpool.Pool) *AuditLog { return &AuditLog{pool: pool} }

// Record writes one entry.
func (a *AuditLog) Record(ctx context.Context, e AuditEntry) error {
	args, err := e.args()
	if err != nil {
		return err
	}
	_, err = a.pool.Exec(ctx, insertAudit, args...)
	return unavailable("audit "+e.Action, err)
}

// AuditRecord is one stored audit entry.
type AuditRecord struct {
	ID     int64          `json:"id"`
	At     time.Time      `json:"at"`
	Actor  string         `json:"actor"`
	Action string         `json:"action"`
	Target string         `json:"target"`
	Reason string         `json:"reason"`
	IDs    []int64        `json:"ids,omitempty"`
	Detail map[string]any `json:"detail,omitempty"`
}

// Page returns up to limit audit records older than before (0: the newest), newest first.
func (a *AuditLog) Page(ctx context.Context, before int64, limit int) ([]AuditRecord, error) {
	rows, err := a.pool.Query(ctx, `
		SELECT id, at, actor, action, target, reason, target_ids, detail FROM admin_audit
		WHERE $1::bigint = 0 OR id < $1::bigint ORDER BY id DESC LIMIT $2`, before, limit)
	if err != nil {
		return nil, unavailable("read audit", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditRecord, error) {
		var x AuditRecord
		err := r.Scan(&x.ID, &x.At, &x.Actor, &x.Action, &x.Target, &x.Reason, &x.IDs, &x.Detail)
		x.At = x.At.UTC()
		if len(x.Detail) == 0 {
			x.Detail = nil
		}
		return x, err
	})
	return out, unavailable("read audit", err)
}
