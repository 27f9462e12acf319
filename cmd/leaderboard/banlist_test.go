package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	lbhttp "github.com/openleaderboard/leaderboard/http"
	"github.com/openleaderboard/leaderboard/storage"
)

// TestBanListSeesABanCommittedDuringARefresh: another API process refreshes its ban list
// (every second) while a ban's transaction is open, before its COMMIT. The refresh must not
// take the list's new version with the old list: the ban reaches that process at its next
// refresh. (With the version from a sequence, not transactional, it read the new version
// with the old list and never read the list again, until another ban.) A ban or unban
// made through a process is not undone there by a list it loaded before (set's version).
func TestBanListSeesABanCommittedDuringARefresh(t *testing.T) {
	env, vars := trustEnv(t)
	env.start(vars) // creates the schema
	ctx := context.Background()
	list := lbhttp.NewBanList(storage.NewBans(env.db()), time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := list.Load(ctx); err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(env.db())
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var version int64
	ban := storage.SetBanned("mallory", true, storage.AuditEntry{Actor: "mod", Action: "user.ban", Target: "mallory", Reason: "aimbot"}, &version)
	if err := ban(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := list.Load(ctx); err != nil { // the other process's periodic refresh, mid-commit
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for range 3 { // later refreshes
		if err := list.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !list.Banned("mallory") {
		t.Fatal("the committed ban never reaches the process whose refresh overlapped its commit")
	}
	if version <= 0 {
		t.Fatalf("the ban's version: %d", version)
	}
}
