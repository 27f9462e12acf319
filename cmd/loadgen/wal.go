package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"
)

// walSample is where PostgreSQL's write-ahead log stood at a mark: its insert position in
// bytes (exact, cluster-wide) and, from pg_stat_wal (PostgreSQL 14 and later), the records
// and full-page images written so far (a backend reports them up to a second late).
type walSample struct {
	bytes      int64
	records    int64
	fpi        int64
	ok, statOK bool
}

// querier is what readWAL needs of a connection or a pool.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readWAL samples the WAL of the cluster pg is connected to.
func readWAL(ctx context.Context, pg querier) walSample {
	var s walSample
	if err := pg.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&s.bytes); err != nil {
		return walSample{}
	}
	s.ok = true
	if err := pg.QueryRow(ctx, `SELECT wal_records, wal_fpi FROM pg_stat_wal`).Scan(&s.records, &s.fpi); err == nil {
		s.statOK = true
	}
	return s
}

// phaseWAL is the WAL a write phase made from its start until the pipeline drained,
// per score_history row and per command it applied: a measure of PostgreSQL's work per
// score that, unlike CPU time, does not depend on how busy the machine was.
type phaseWAL struct {
	Bytes           int64   `json:"bytes"`
	BytesPerRow     float64 `json:"bytes_per_applied_row"`
	BytesPerCommand float64 `json:"bytes_per_applied_command"`
	// From pg_stat_wal, when the server has it.
	Records       *int64   `json:"records,omitempty"`
	RecordsPerRow *float64 `json:"records_per_applied_row,omitempty"`
	FPI           *int64   `json:"full_page_images,omitempty"`
	FPIPer1kRows  *float64 `json:"full_page_images_per_1000_rows,omitempty"`
}

// walBetween is the WAL made from a to b by rows applied rows, commands commands; nil
// when either sample failed or nothing was applied.
func walBetween(a, b walSample, rows, commands int64) *phaseWAL {
	if !a.ok || !b.ok || rows <= 0 {
		return nil
	}
	w := &phaseWAL{Bytes: b.bytes - a.bytes}
	w.BytesPerRow = round2(float64(w.Bytes) / float64(rows))
	if commands > 0 {
		w.BytesPerCommand = round2(float64(w.Bytes) / float64(commands))
	}
	if a.statOK && b.statOK {
		records, fpi := b.records-a.records, b.fpi-a.fpi
		perRow, per1k := round2(float64(records)/float64(rows)), round2(float64(fpi)*1000/float64(rows))
		w.Records, w.RecordsPerRow, w.FPI, w.FPIPer1kRows = &records, &perRow, &fpi, &per1k
	}
	return w
}

// fmtWAL is a phase's WAL on one line.
func fmtWAL(w *phaseWAL) string {
	s := fmt.Sprintf("%.0f B per applied row, %.0f per command (%.1f MB)", w.BytesPerRow, w.BytesPerCommand, float64(w.Bytes)/1e6)
	if w.RecordsPerRow != nil {
		s += fmt.Sprintf("; %.1f records and %.2f full-page images per row (%d images)", *w.RecordsPerRow, *w.FPIPer1kRows/1000, *w.FPI)
	}
	return s
}

// printWALTable prints the WAL per applied row of the write phases that have it.
func (b *bench) printWALTable(tw *tabwriter.Writer, blank func()) {
	header := false
	for _, ph := range b.writes {
		w := b.writeReport(ph).WAL
		if w == nil {
			continue
		}
		if !header {
			blank()
			fmt.Fprintln(tw, "PostgreSQL WAL\tB/row\tB/command\trecords/row\tFPI/1000 rows\tMB\t\t\t\t\t")
			header = true
		}
		records, fpi := "-", "-"
		if w.RecordsPerRow != nil {
			records, fpi = fmt.Sprintf("%.1f", *w.RecordsPerRow), fmt.Sprintf("%.1f", *w.FPIPer1kRows)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%s\t%.1f\t\t\t\t\t\n", ph.name, w.BytesPerRow, w.BytesPerCommand, records, fpi, float64(w.Bytes)/1e6)
	}
}

// printWALNote explains the WAL figures.
func printWALNote(out io.Writer) {
	fmt.Fprintln(out, "WAL:       PostgreSQL's WAL insert position (pg_current_wal_lsn) from a write phase's start until drained,")
	fmt.Fprintln(out, "           per score_history row added; cluster-wide (BENCH_PG=machine: other databases' writes count too);")
	fmt.Fprintln(out, "           records and full-page images (FPI) from pg_stat_wal, which backends update up to a second late")
}
