package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
)

// memoryResult is cdc's peak resident memory in the two situations that hold the most data: a
// large copy while other tables stream, and the catch-up of a large backlog.
type memoryResult struct {
	// Copy is the lag scenario's run (independent mode) with -memory-rows rows in the big table.
	Copy *lagResult `json:"copy"`
	// Backlog is an exactly-once catch-up of -memory-txns pgbench transactions.
	BacklogTxns    int64   `json:"backlog_transactions"`
	Backlog        catchUp `json:"backlog"`
	TargetRSSMiB   float64 `json:"target_rss_mib"`
	CopyOverTarget bool    `json:"copy_over_target"`
	BacklogOver    bool    `json:"backlog_over_target"`
}

// memoryTargetMiB is the bound on cdc's peak RSS in both runs.
const memoryTargetMiB = 256

func (b *bench) memory(ctx context.Context) (*memoryResult, error) {
	res := &memoryResult{TargetRSSMiB: memoryTargetMiB}
	b.logf("memory: a copy of %s rows while two small tables stream", thousands(b.o.memoryRows))
	l, err := b.lag(ctx, "independent", b.o.memoryRows)
	if err != nil {
		return res, fmt.Errorf("copy: %w", err)
	}
	res.Copy = l
	res.CopyOverTarget = l.PeakRSSMiB > memoryTargetMiB
	b.logf("memory: copy of %s rows: peak RSS %.0f MiB", thousands(b.o.memoryRows), l.PeakRSSMiB)

	s, err := b.newScenario(ctx, "memory")
	if err != nil {
		return res, err
	}
	defer s.cleanup()
	pgbench, conn, exports, err := s.pgbenchInit(ctx, 1)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.Background())
	ln := s.newLane(deliveryExactlyOnce, "", exports)
	defer ln.close()
	if err := ln.hydrate(ctx, conn); err != nil {
		return res, err
	}
	if res.BacklogTxns, err = s.pgbenchBacklog(ctx, pgbench, b.o.memoryTxns); err != nil {
		return res, err
	}
	target, err := currentLSN(ctx, conn)
	if err != nil {
		return res, err
	}
	run, _, err := ln.catchUp(ctx, target, res.BacklogTxns*4)
	if err != nil {
		return res, err
	}
	res.Backlog = run
	res.BacklogOver = run.PeakRSSMiB > memoryTargetMiB
	b.logf("memory: catch-up of %s transactions: peak RSS %.0f MiB", thousands(res.BacklogTxns), run.PeakRSSMiB)
	return res, nil
}

func printMemory(w io.Writer, m *memoryResult) {
	if m == nil {
		return
	}
	fmt.Fprintf(w, "\nMemory (peak RSS of cdc, whole process life; target <= %.0f MiB)\n", m.TargetRSSMiB)
	if m.Copy != nil {
		fmt.Fprintf(w, "   copy of %s rows while 2 small tables stream: %.0f MiB (copy %.1fs, cdc CPU %.1fs)\n",
			thousands(m.Copy.BigRows), m.Copy.PeakRSSMiB, m.Copy.CopySeconds, m.Copy.CPUSeconds)
	}
	if m.Backlog.CDC.Count > 0 {
		fmt.Fprintf(w, "   catch-up of %s transactions (%s changes): %.0f MiB (%.0f changes/s, cdc CPU %.1fs)\n",
			thousands(m.BacklogTxns), thousands(m.Backlog.CDC.Count), m.Backlog.PeakRSSMiB, m.Backlog.CDC.PerSecond, m.Backlog.CPUSeconds)
	}
}

// pgbenchInit fills the scenario's database with pgbench's tables at scale (history gets a
// primary key, as cdc's tables need one; then VACUUM ANALYZE and a checkpoint) and returns
// pgbench's path, a connection (the caller closes it) and the tables as exports.
func (s *scenario) pgbenchInit(ctx context.Context, scale int) (string, *pgx.Conn, []change.ExportID, error) {
	pgbench, err := findPgbench()
	if err != nil {
		return "", nil, nil, err
	}
	s.b.logf("%s: pgbench -i -s %d", s.name, scale)
	if _, err := runPgbench(ctx, pgbench, s.db.url, "-i", "-q", "-s", strconv.Itoa(scale)); err != nil {
		return "", nil, nil, err
	}
	if err := s.db.exec(ctx, "ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY",
		"VACUUM ANALYZE", "CHECKPOINT"); err != nil {
		return "", nil, nil, err
	}
	conn, err := pgx.Connect(ctx, s.db.url)
	if err != nil {
		return "", nil, nil, fmt.Errorf("connect: %w", err)
	}
	exports := make([]change.ExportID, len(pgbenchTables))
	for i, t := range pgbenchTables {
		exports[i] = exportID(t)
	}
	return pgbench, conn, exports, nil
}
