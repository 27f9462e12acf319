package http

import (
	"context"
	"io"
	"log/slog"
	"testing"
)

// fixedBans is a ban store holding one list at one version.
type fixedBans struct {
	users   map[string]bool
	version int64
}

func (f fixedBans) Version(context.Context) (int64, error) { return f.version, nil }
func (f fixedBans) Users(context.Context) (map[string]bool, int64, error) {
	return f.users, f.version, nil
}

// TestBanListSetYieldsToANewerList: a ban made through this process whose handler runs
// after the process loaded a newer list (an unban of the same user, committed after it)
// does not undo that list; a ban newer than the loaded list applies at once.
func TestBanListSetYieldsToANewerList(t *testing.T) {
	b := NewBanList(fixedBans{users: map[string]bool{}, version: 6}, 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := b.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.set("mallory", true, 5) // the ban of version 5; the loaded list (6) has its unban
	if b.Banned("mallory") {
		t.Error("a ban older than the loaded list undid its unban")
	}
	b.set("eve", true, 7)
	if !b.Banned("eve") {
		t.Error("a ban newer than the loaded list did not apply at once")
	}
}
