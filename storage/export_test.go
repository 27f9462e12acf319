package storage

import "github.com/jackc/pgx/v5/pgxpool"

// RelayReadSQL is the relay's read statement, for the test of its plan.
var RelayReadSQL = relayReadSQL

// PruneSQL is the prune's statement, for the test of its plan.
var PruneSQL = pruneSQL

// ClaimSession is the session a relay's claim holds its shard's lock on.
func ClaimSession(c OutboxClaim) *pgxpool.Conn { return c.(*shardClaim).conn }
