package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// rowsRead is how many rows PostgreSQL read for one copy of a table, as pg_stat_user_tables
// counts them: seq_tup_read (rows returned by sequential and TID range scans) plus
// idx_tup_fetch (heap rows fetched by index scans). A copy that reads each row once reads as
// many as the table holds; the chunked copy's planning pass (OFFSET n LIMIT 1 index scans,
// which fetch every heap row while the visibility map is unset) adds a second pass.
type rowsRead struct {
	Strategy  string  `json:"strategy"`
	TableRows int64   `json:"table_rows"`
	Read      int64   `json:"rows_read"`
	IndexRead int64   `json:"rows_read_by_index_scans"`
	Ratio     float64 `json:"ratio"`
}

// tupCounts are a table's seq_tup_read and idx_tup_fetch.
type tupCounts struct{ seq, idx int64 }

func (t tupCounts) total() int64 { return t.seq + t.idx }

// tupRead returns seq_tup_read and idx_tup_fetch of table.
func tupRead(ctx context.Context, dbURL string, e change.ExportID) (tupCounts, error) {
	var n []int64
	err := pgScalar(ctx, dbURL, `SELECT ARRAY[coalesce(seq_tup_read, 0), coalesce(idx_tup_fetch, 0)]
		FROM pg_stat_user_tables WHERE relid = $1::regclass`, &n, e.String())
	if err != nil {
		return tupCounts{}, err
	}
	return tupCounts{seq: n[0], idx: n[1]}, nil
}

// tupReadSettled is tupRead once the count stopped moving: backends report their counts when
// they exit or at most once a second, so the count is read every half second until two reads
// agree (at most 15 s). Each read is on a new connection, which sees the current statistics.
func tupReadSettled(ctx context.Context, dbURL string, e change.ExportID) (tupCounts, error) {
	last, err := tupRead(ctx, dbURL, e)
	if err != nil {
		return tupCounts{}, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return tupCounts{}, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		n, err := tupRead(ctx, dbURL, e)
		if err != nil {
			return tupCounts{}, err
		}
		if n == last {
			return n, nil
		}
		last = n
	}
	return last, nil
}

// freshCopies copies a freshly loaded table (filled, never vacuumed, autovacuum off for it: its
// visibility map is unset, as after a bulk load) once with each snapshot strategy, each on a
// table of its own, and returns what PostgreSQL read for each.
func (s *scenario) freshCopies(ctx context.Context, rows int64) (map[string]*rowsRead, error) {
	b := s.b
	out := make(map[string]*rowsRead)
	for _, strategy := range []string{strategyChunked, strategyCopy} {
		table := "public.bench_fresh_" + strategy
		e := exportID(table)
		b.logf("snapshot: rows read by CDC_SNAPSHOT_STRATEGY=%s on a freshly loaded table (%s, %s rows, not vacuumed)", strategy, table, thousands(rows))
		stmts := []string{fmt.Sprintf(snapshotTableDDL, table) + " WITH (autovacuum_enabled = false)"}
		const chunk = 500_000
		for from := int64(1); from <= rows; from += chunk {
			stmts = append(stmts, fillTableSQL(table, from, min(from+chunk-1, rows)))
		}
		if err := s.db.exec(ctx, stmts...); err != nil {
			return out, err
		}
		run, _, _, err := s.copyTable(ctx, e, rows, strategy, "fresh"+strategy, nil, nil)
		if err != nil {
			return out, fmt.Errorf("fresh %s copy: %w", strategy, err)
		}
		out[strategy] = &rowsRead{Strategy: strategy, TableRows: rows, Read: run.RowsRead, IndexRead: run.RowsReadIndex, Ratio: float64(run.RowsRead) / float64(rows)}
		b.logf("snapshot: CDC_SNAPSHOT_STRATEGY=%s on a fresh table read %s rows = %.2f × the table (%s by index scans)",
			strategy, thousands(run.RowsRead), out[strategy].Ratio, thousands(run.RowsReadIndex))
		if err := s.db.exec(ctx, "DROP TABLE "+table); err != nil {
			return out, err
		}
	}
	return out, nil
}

// printRowsRead writes rows read ÷ table rows for each strategy: on the vacuumed bench table
// (the measured runs) and on a freshly loaded one.
func (s *snapshotResult) printRowsRead(w io.Writer, runs []snapshotRun) {
	var parts []string
	for _, c := range runs {
		if c.RowsReadRatio <= 0 {
			continue
		}
		part := fmt.Sprintf("%s %.2f on the vacuumed table", c.Strategy, c.RowsReadRatio)
		if f := s.RowsReadFresh[c.Strategy]; f != nil {
			part += fmt.Sprintf(", %.2f on a freshly loaded one (%s of %s rows, %s of them by index scans)", f.Ratio, thousands(f.Read), thousands(f.TableRows), thousands(f.IndexRead))
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return
	}
	fmt.Fprintf(w, "   rows read ÷ table rows (pg_stat_user_tables seq_tup_read + idx_tup_fetch, before/after each copy): %s (target <= 1.05)\n",
		strings.Join(parts, "; "))
}
