package storage

// RelayReadSQL is the relay's read statement, for the test of its plan.
var RelayReadSQL = relayReadSQL

// PruneSQL is the prune's statement, for the test of its plan.
var PruneSQL = pruneSQL
