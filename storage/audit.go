package storage

import (
	"context"
	"encoding/json"
	"fmt"

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
