package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/openleaderboard/leaderboard/storage/storagetest"
)

func TestWALBetween(t *testing.T) {
	a := walSample{bytes: 1_000_000, records: 500, fpi: 10, ok: true, statOK: true}
	b := walSample{bytes: 1_000_000 + 3_600_000, records: 500 + 14_000, fpi: 10 + 40, ok: true, statOK: true}
	w := walBetween(a, b, 2_000, 1_000)
	if w == nil {
		t.Fatal("no WAL between two good samples")
	}
	if w.Bytes != 3_600_000 || w.BytesPerRow != 1800 || w.BytesPerCommand != 3600 {
		t.Errorf("bytes %d, per row %v, per command %v; want 3600000, 1800, 3600", w.Bytes, w.BytesPerRow, w.BytesPerCommand)
	}
	if w.Records == nil || *w.Records != 14_000 || *w.RecordsPerRow != 7 || *w.FPI != 40 || *w.FPIPer1kRows != 20 {
		t.Errorf("records %v (%v per row), FPI %v (%v per 1000 rows); want 14000 (7), 40 (20)", w.Records, w.RecordsPerRow, w.FPI, w.FPIPer1kRows)
	}
	if got := fmtWAL(w); !strings.Contains(got, "1800 B per applied row, 3600 per command (3.6 MB)") || !strings.Contains(got, "7.0 records and 0.02 full-page images per row (40 images)") {
		t.Errorf("fmtWAL = %q", got)
	}

	// Without pg_stat_wal: bytes only.
	noStat := b
	noStat.statOK = false
	if w := walBetween(a, noStat, 2_000, 1_000); w == nil || w.Records != nil || w.FPI != nil || w.BytesPerRow != 1800 {
		t.Errorf("without pg_stat_wal: %+v", w)
	}
	if got := fmtWAL(walBetween(a, noStat, 2_000, 1_000)); strings.Contains(got, "records") {
		t.Errorf("fmtWAL without pg_stat_wal = %q", got)
	}
	// A failed sample or nothing applied: no figure rather than a wrong one.
	for _, c := range []struct {
		name string
		a, b walSample
		rows int64
	}{{"failed start", walSample{}, b, 2_000}, {"failed end", a, walSample{}, 2_000}, {"no rows", a, b, 0}} {
		if w := walBetween(c.a, c.b, c.rows, 0); w != nil {
			t.Errorf("%s: %+v, want nil", c.name, w)
		}
	}
}

// TestReadWALOfARealServer reads the WAL position of the test PostgreSQL before and after a
// write: it moves by at least the bytes written, and pg_stat_wal (PostgreSQL 14+) is read.
func TestReadWALOfARealServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := storagetest.FromEnv(os.Getenv).NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE w (v text)`); err != nil {
		t.Fatal(err)
	}
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	a := readWAL(ctx, conn)
	if !a.ok || a.bytes <= 0 {
		t.Fatalf("first sample %+v", a)
	}
	if version >= 140000 && !a.statOK {
		t.Errorf("pg_stat_wal not read from PostgreSQL %d", version)
	}
	const rows, size = 200, 1024 // each row a text of 32 md5s
	if _, err := conn.Exec(ctx, `INSERT INTO w SELECT repeat(md5(i::text), 32) FROM generate_series(1, $1) i`, rows); err != nil {
		t.Fatal(err)
	}
	b := readWAL(ctx, conn)
	if !b.ok || b.bytes-a.bytes < rows*size {
		t.Errorf("WAL moved %d bytes over %d rows of %d bytes", b.bytes-a.bytes, rows, size)
	}
	if b.statOK && (b.records < a.records || b.fpi < a.fpi) {
		t.Errorf("pg_stat_wal went back: %+v then %+v", a, b)
	}
	// On a closed connection: not ok, so that no figure is made of it.
	conn.Close(ctx)
	if s := readWAL(ctx, conn); s.ok || s.statOK {
		t.Errorf("sample on a closed connection: %+v", s)
	}
}
