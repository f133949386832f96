package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/watermark"
)

// The scale scenarios (issue 20, item 6): many tables with several copies running at once
// beside streaming (copies), and a large copy beside the catch-up of a backlog (copy-catchup).
// Both report cdc's RSS (VmRSS sampled every 200 ms, and VmHWM), the watermark lag of the
// tables already hydrated in seconds, and records/s by kind (snapshot rows, stream changes,
// watermark records) per phase.
//
// The lag in seconds: every 200 ms a sampler reads pg_current_wal_lsn() and then the latest
// watermark of every hydrated table as a consumer reads the watermark topic (pkg/wait, quiet
// records included). A table's lag at a sample is how long ago the WAL was last at or below its
// watermark: the age of the oldest change it may still be missing (0 when its watermark is at
// or past the WAL position just read). The resolution is the sampling interval.

// The scale scenarios sample the WAL position every scaleWALEvery, the watermarks and cdc's RSS
// every scaleEvery of those, and cdc's /metrics every fifth of these.
const (
	scaleWALEvery    = 50 * time.Millisecond
	scaleEvery       = 4
	scaleSampleEvery = scaleEvery * scaleWALEvery
)

// scalePhase is one window of a scale scenario.
type scalePhase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	// Records per second by kind: snapshot rows (tidemark_snapshot_rows_total), watermark
	// records (the watermark topic, read back), stream changes (tidemark_sink_records_total
	// minus the other two).
	SnapshotRowsPerSec  float64 `json:"snapshot_rows_per_second"`
	StreamChangesPerSec float64 `json:"stream_changes_per_second"`
	WatermarksPerSec    float64 `json:"watermark_records_per_second"`
	// Lag of the hydrated tables (every table hydrated before the window began), seconds, over
	// every (table, sample) pair in the window.
	LagSamples int     `json:"lag_samples"`
	LagP50Sec  float64 `json:"lag_p50_seconds"`
	LagP99Sec  float64 `json:"lag_p99_seconds"`
	LagMaxSec  float64 `json:"lag_max_seconds"`
	// RSS of cdc sampled in the window, MiB.
	RSSMedianMiB float64 `json:"rss_median_mib"`
	RSSMaxMiB    float64 `json:"rss_max_mib"`
	// cdc's Go memory statistics scraped once a second in the window (/metrics), highest
	// values, MiB: the heap in use, the heap held from the OS (heap_sys - heap_released), the
	// next GC's goal, goroutine stacks.
	HeapInuseMaxMiB  float64 `json:"heap_inuse_max_mib"`
	HeapHeldMaxMiB   float64 `json:"heap_held_max_mib"`
	NextGCMaxMiB     float64 `json:"next_gc_max_mib"`
	StackInuseMaxMiB float64 `json:"stack_inuse_max_mib"`
}

// scaleResult is one scale scenario.
type scaleResult struct {
	Scenario string `json:"scenario"`
	// Tables in the publication once the copies are added; Copies copied at once, CopyRows each.
	Tables   int   `json:"tables"`
	Copies   int   `json:"copies"`
	CopyRows int64 `json:"rows_per_copy"`
	// CopiesAtOnce is the most copies seen hydrating at the same time (watermark states).
	CopiesAtOnce int `json:"copies_at_once_max"`
	// BacklogTxns is the catch-up's backlog (copy-catchup only).
	BacklogTxns int64 `json:"backlog_transactions,omitempty"`
	// WriterRate is the steady writer's transactions per second on hydrated tables.
	WriterRate int          `json:"writer_transactions_per_second"`
	Phases     []scalePhase `json:"phases"`
	CPUSeconds float64      `json:"cdc_cpu_seconds"`
	PeakRSSMiB float64      `json:"cdc_peak_rss_mib"` // VmHWM
	// HeapProfiles are cdc's heap profiles (go tool pprof), taken at the end of each phase.
	HeapProfiles []string `json:"heap_profiles,omitempty"`
	TargetRSSMiB float64  `json:"target_rss_mib"`
	TargetLagSec float64  `json:"target_hydrated_lag_p99_seconds"`
	// Timeline is every watermark sample: seconds since cdc started, the highest lag of a
	// hydrated table (seconds) and cdc's RSS (MiB).
	Timeline [][3]float64 `json:"timeline_seconds_maxlag_rssmib"`
}

// scaleLagTargetSec is the bound on the hydrated tables' lag p99.
const scaleLagTargetSec = 1.0

// copies publishes -copies-tables tables: 10 busy ones written at -lag-rate transactions a
// second, -copies of -copies-rows rows added to the publication in one statement once the
// others are hydrated, and quiet ones (10 rows, never written) for the rest.
func (b *bench) copies(ctx context.Context) (*scaleResult, error) {
	const busy = 10
	n, copies := b.o.copiesTables, b.o.copies
	quiet := n - busy - copies
	res := &scaleResult{Scenario: scenarioCopies, Tables: n, Copies: copies, CopyRows: b.o.copiesRows, WriterRate: b.o.lagRate,
		TargetRSSMiB: memoryTargetMiB, TargetLagSec: scaleLagTargetSec}
	s, err := b.newScenario(ctx, scenarioCopies)
	if err != nil {
		return nil, err
	}
	defer s.cleanup()

	var hydrated, copied []change.ExportID
	var busyIDs []change.ExportID
	var ddl []string
	for i := range quiet {
		e := exportID(fmt.Sprintf("public.quiet_%04d", i))
		ddl = append(ddl, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, v int); INSERT INTO %s SELECT g, g FROM generate_series(1, 10) g", pgcat.Table(e), pgcat.Table(e)))
		hydrated = append(hydrated, e)
	}
	for i := range busy {
		e := exportID(fmt.Sprintf("public.busy_%02d", i))
		ddl = append(ddl, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, v int); INSERT INTO %s SELECT g, 0 FROM generate_series(1, 1000) g", pgcat.Table(e), pgcat.Table(e)))
		hydrated, busyIDs = append(hydrated, e), append(busyIDs, e)
	}
	b.logf("%s: creating %d quiet and %d busy tables", s.name, quiet, busy)
	for i := 0; i < len(ddl); i += 100 {
		if err := s.db.exec(ctx, strings.Join(ddl[i:min(i+100, len(ddl))], ";\n")); err != nil {
			return res, err
		}
	}
	for i := range copies {
		e := exportID(fmt.Sprintf("public.copy_%02d", i))
		if err := s.createBigTable(ctx, e.String(), b.o.copiesRows); err != nil {
			return res, err
		}
		copied = append(copied, e)
	}
	if err := s.db.exec(ctx, "CREATE PUBLICATION "+s.pub+" FOR TABLE "+tableList(hydrated)); err != nil {
		return res, err
	}

	run, err := s.startScaleRun(ctx, nil, fmt.Sprintf("hydrating %d tables", len(hydrated)), hydrated, busyIDs)
	if err != nil {
		return res, err
	}
	defer run.close()
	wctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	if _, err := run.wt.until(wctx, "hydration of every table", allHydrated(0, hydrated...), run.p.check); err != nil {
		return res, err
	}
	b.logf("%s: %d tables hydrated %.1fs after cdc started", s.name, len(hydrated), time.Since(run.p.started).Seconds())
	run.heapProfile(ctx, "hydrated")
	if err := run.startWriter(ctx, busyIDs, "v = v + 1", b.o.lagRate); err != nil {
		return res, err
	}
	if err := run.mark(ctx, "streaming"); err != nil {
		return res, err
	}
	time.Sleep(5 * time.Second)
	if err := run.mark(ctx, fmt.Sprintf("%d copies", copies)); err != nil {
		return res, err
	}
	b.logf("%s: ALTER PUBLICATION %s ADD TABLE (%d tables)", s.name, s.pub, copies)
	if err := s.db.exec(ctx, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", s.pub, tableList(copied))); err != nil {
		return res, err
	}
	if _, err := run.wt.until(wctx, "hydration of the copies", allHydrated(0, copied...), run.p.check); err != nil {
		return res, err
	}
	run.heapProfile(ctx, "copied")
	if err := run.mark(ctx, ""); err != nil {
		return res, err
	}
	res.CopiesAtOnce = run.copiesAtOnce(copied)
	return res, run.finish(ctx, res)
}

// copyCatchUp hydrates pgbench's tables, stops cdc, writes a -catchup-txns backlog, adds a
// -catchup-copy-rows table to the publication and restarts cdc: it catches the backlog up and
// copies the table at the same time, while a steady writer keeps updating pgbench_tellers. The
// catch-up phase ends once pgbench's tables' watermarks reach the backlog's end, and then the
// WAL position read at that moment (the writer's changes written meanwhile).
func (b *bench) copyCatchUp(ctx context.Context) (*scaleResult, error) {
	res := &scaleResult{Scenario: scenarioCopyCatchUp, Copies: 1, CopyRows: b.o.catchupCopyRows, WriterRate: b.o.lagRate,
		TargetRSSMiB: memoryTargetMiB, TargetLagSec: scaleLagTargetSec}
	s, err := b.newScenario(ctx, "copy_catchup")
	if err != nil {
		return nil, err
	}
	defer s.cleanup()
	pgbench, conn, exports, err := s.pgbenchInit(ctx, 1)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.Background())
	res.Tables = len(exports) + 1
	big := exportID("public.catchup_big")
	if err := s.createBigTable(ctx, big.String(), b.o.catchupCopyRows); err != nil {
		return res, err
	}
	tables := make([]string, len(exports))
	for i, e := range exports {
		tables[i] = e.String()
	}
	vars := map[string]string{"CDC_TABLES": strings.Join(tables, ","), "CDC_PUBLICATION_POLL_INTERVAL": "1s"}

	// Hydrate pgbench's tables, then stop.
	first, err := s.startScaleRun(ctx, vars, "", nil, nil)
	if err != nil {
		return res, err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	if _, err := first.wt.until(wctx, "hydration of pgbench's tables", allHydrated(0, exports...), first.p.check); err != nil {
		first.close()
		return res, err
	}
	if err := first.p.stop(time.Minute); err != nil {
		first.close()
		return res, err
	}
	first.close()

	// The backlog, and the big table added while cdc is stopped.
	if res.BacklogTxns, err = s.pgbenchBacklog(ctx, pgbench, b.o.catchupTxns); err != nil {
		return res, err
	}
	target, err := currentLSN(ctx, conn)
	if err != nil {
		return res, err
	}
	if err := s.db.exec(ctx, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", s.pub, pgcat.Table(big))); err != nil {
		return res, err
	}

	run, err := s.startScaleRun(ctx, vars, "catch-up", exports, exports)
	if err != nil {
		return res, err
	}
	defer run.close()
	if err := run.startWriter(ctx, []change.ExportID{exportID("public.pgbench_tellers")}, "tbalance = tbalance + 1", b.o.lagRate); err != nil {
		return res, err
	}
	caughtUp, err := run.wt.until(wctx, "catch-up of the backlog", allHydrated(target, exports...), run.p.check)
	if err != nil {
		return res, err
	}
	// Then what the writer wrote until then: the catch-up ends when the watermarks reach the
	// WAL's position at the backlog's end.
	lsn, err := currentLSN(ctx, conn)
	if err != nil {
		return res, err
	}
	if caughtUp, err = run.wt.until(wctx, "catch-up of the writer", allHydrated(lsn, exports...), run.p.check); err != nil {
		return res, err
	}
	b.logf("%s: backlog caught up %.1fs after cdc started", s.name, caughtUp.Sub(run.p.started).Seconds())
	run.heapProfile(ctx, "caught-up")
	hydrated := func(m map[change.ExportID]watermark.Record) bool {
		r, ok := m[big]
		return ok && r.State == watermark.StateHydrated
	}
	if hydrated(run.wt.snapshot()) {
		b.logf("%s: WARNING: the copy ended before the catch-up; raise -catchup-copy-rows", s.name)
	} else {
		if err := run.mark(ctx, "copy after catch-up"); err != nil {
			return res, err
		}
		if _, err := run.wt.until(wctx, "hydration of "+big.String(), hydrated, run.p.check); err != nil {
			return res, err
		}
		run.heapProfile(ctx, "copied")
	}
	if err := run.mark(ctx, ""); err != nil {
		return res, err
	}
	res.CopiesAtOnce = run.copiesAtOnce([]change.ExportID{big})
	return res, run.finish(ctx, res)
}

// tableList is exports as a comma-separated list of quoted table names.
func tableList(exports []change.ExportID) string {
	names := make([]string, len(exports))
	for i, e := range exports {
		names[i] = pgcat.Table(e)
	}
	return strings.Join(names, ", ")
}
