package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

// snapshotTableDDL is the generated table: about 100 bytes per row on disk.
const snapshotTableDDL = `CREATE TABLE %s (
	id bigint PRIMARY KEY,
	a int NOT NULL,
	b text NOT NULL,
	c numeric NOT NULL,
	d timestamptz NOT NULL)`

// fillTable inserts rows [from, to] into a table of snapshotTableDDL's shape.
func fillTableSQL(table string, from, to int64) string {
	return fmt.Sprintf(`INSERT INTO %s
		SELECT g, (g::bigint * 7919) %% 1000003, md5(g::text) || substr(md5((g + 1)::text), 1, 8),
			round((g %% 100000) / 7.0, 4), timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second'
		FROM generate_series(%d, %d) g`, table, from, to)
}

// createBigTable creates and fills a table in the scenario's database, then freezes it (so that
// no reader sets hint bits) and checkpoints, so that every reader finds the same clean pages.
func (s *scenario) createBigTable(ctx context.Context, table string, rows int64) error {
	b, db := s.b, s.db
	b.logf("%s: generating %s rows in %s", s.name, thousands(rows), table)
	if err := db.exec(ctx, fmt.Sprintf(snapshotTableDDL, table)); err != nil {
		return err
	}
	const chunk = 500_000
	start := time.Now()
	for from := int64(1); from <= rows; from += chunk {
		to := min(from+chunk-1, rows)
		if err := db.exec(ctx, fillTableSQL(table, from, to)); err != nil {
			return err
		}
		if rows > chunk {
			b.logf("  %s: %s of %s rows", table, thousands(to), thousands(rows))
		}
	}
	if err := db.exec(ctx, "VACUUM (FREEZE, ANALYZE) "+table, "CHECKPOINT"); err != nil {
		return err
	}
	b.logf("  %s: %s rows generated in %s", table, thousands(rows), time.Since(start).Round(100*time.Millisecond))
	return nil
}

func (b *bench) snapshot(ctx context.Context) (*snapshotResult, error) {
	s, err := b.newScenario(ctx, scenarioSnapshot)
	if err != nil {
		return nil, err
	}
	defer s.cleanup()
	const table = "public.bench_snapshot"
	e := exportID(table)
	if err := s.createBigTable(ctx, table, b.o.rows); err != nil {
		return nil, err
	}
	res := &snapshotResult{Table: table, Rows: b.o.rows, Workers: b.o.workers, Delivery: "exactly-once"}
	if err := pgScalar(ctx, s.db.url, "SELECT pg_relation_size($1::regclass)", &res.TableBytes, table); err != nil {
		return nil, err
	}

	// (a) READ limit.
	b.logf("snapshot: READ limit (%d workers, text COPY by ctid range)", b.o.workers)
	rd, err := readLimit(ctx, s.db.url, e, b.o.workers)
	if err != nil {
		return res, fmt.Errorf("read limit: %w", err)
	}
	res.Read, res.Ranges = rd.tp, rd.ranges
	b.logf("snapshot: READ %.0f rows/s, %.1f MB/s", res.Read.PerSecond, res.Read.MBPerSecond)

	first, errs := s.snapshotRuns(ctx, e, res)
	if err := s.profileCopies(ctx, e, res); err != nil {
		b.logf("snapshot: CPU split: %v", err)
	}
	if fresh, err := s.freshCopies(ctx, b.o.rows); err != nil {
		errs = append(errs, err)
	} else {
		res.RowsReadFresh = fresh
	}
	if first.topic == "" {
		return res, errors.Join(append(errs, ctx.Err())...)
	}

	// (b) WRITE limit: the records cdc wrote, produced again with the sink's settings.
	policy, err := b.k.cleanupPolicy(ctx, first.topic)
	if err != nil {
		return res, errors.Join(append(errs, err)...)
	}
	res.writeLimits, err = s.measureWrite(ctx, first.stats, " of the "+first.strategy+" run",
		map[string]string{first.topic: s.prefix + ".write.snapshot"}, map[string]string{first.topic: policy})
	if err != nil {
		return res, errors.Join(append(errs, err)...)
	}
	res.setRatios()
	res.RatioCeiling = ratio(res.CDC.PerSecond, res.Read.PerSecond, res.CeilingBest.PerSecond)
	if res.Copy != nil && res.CDC.Seconds > 0 {
		b.logf("snapshot: chunked / copy = %.2f (from process start %.2f)", res.RatioStrategy, res.RatioStrategyFromProc)
	}
	return res, errors.Join(errs...)
}

// copiedRun is what one cdc copy of the snapshot table wrote, for the WRITE limit.
type copiedRun struct {
	stats    topicStats
	topic    string
	strategy string
}

// snapshotRuns has (c) cdc copy the table with each snapshot strategy, snapshotRounds times
// each, in the order A B B A A B ... (A chunked, B copy), each run with its own slot and topics,
// so that a drift during the runs favours neither. An unmeasured chunked run goes first: the
// first cdc run against a fresh broker is slower (its first topic creation alone can take
// seconds), and in any order that penalty would fall on one strategy. A strategy whose run
// fails runs no more; the other goes on. It returns the first successful run (chunked if any)
// and each strategy's error.
func (s *scenario) snapshotRuns(ctx context.Context, e change.ExportID, res *snapshotResult) (copiedRun, []error) {
	b := s.b
	b.logf("snapshot: warm-up run (not measured)")
	if _, _, _, err := s.copyTable(ctx, e, b.o.rows, strategyChunked, "warmup", nil, nil); err != nil {
		b.logf("snapshot: warm-up run: %v (the measured runs follow)", err)
	}
	runs := make(map[string][]snapshotRun)
	failed := make(map[string]error)
	var first copiedRun
	for i, strategy := range strategyOrder(b.o.snapshotRounds) {
		if ctx.Err() != nil {
			break
		}
		if failed[strategy] != nil {
			continue
		}
		run, st, topic, err := s.copyTable(ctx, e, b.o.rows, strategy, fmt.Sprintf("%s%d", strategy, i/2), nil, nil)
		if err != nil {
			b.logf("snapshot: cdc %s: %v", strategy, err)
			failed[strategy] = fmt.Errorf("cdc %s: %w", strategy, err)
			continue
		}
		runs[strategy] = append(runs[strategy], run)
		if first.topic == "" || strategy == strategyChunked && first.strategy != strategyChunked {
			first = copiedRun{stats: st, topic: topic, strategy: strategy}
		}
	}
	res.setRuns(runs[strategyChunked], runs[strategyCopy], b.o.snapshotRounds)
	return first, []error{failed[strategyChunked], failed[strategyCopy]}
}

// measureWrite measures the WRITE limit, the sample records of stats produced again into dest
// with the sink's settings in transactions as large as cdc's (best of writeLimitRounds), and the
// write ceiling. what says whose records they are, for the log.
func (s *scenario) measureWrite(ctx context.Context, stats topicStats, what string, dest, policy map[string]string) (writeLimits, error) {
	b := s.b
	perTxn := max(1, int(math.Round(stats.recordsPerTxn())))
	b.logf("%s: WRITE limit (%s records%s, transactional, %d records/txn, best of %d)", s.name, thousands(stats.Records), what, perTxn, writeLimitRounds)
	w, rates, err := bestWriteLimit(ctx, b.k, stats.samples, dest, policy, stats.Records, perTxn)
	if err != nil {
		return writeLimits{}, fmt.Errorf("write limit: %w", err)
	}
	write := newThroughput(w.Records, w.Bytes, time.Duration(w.Seconds*float64(time.Second)),
		fmt.Sprintf("%s; %d transactions; %d distinct sample records cycled; best of %s records/s", w.Mode, w.Transactions, len(stats.samples), formatRates(rates)))
	b.logf("%s: WRITE %.0f records/s, %.1f MB/s", s.name, write.PerSecond, write.MBPerSecond)
	b.logf("%s: write ceiling (1 and 2 producers, sink settings and larger batches, no transactions)", s.name)
	ceiling, err := writeCeiling(ctx, b.k, stats.samples, policy, s.prefix+".ceil", stats.Records)
	if err != nil {
		return writeLimits{Write: write}, fmt.Errorf("write ceiling: %w", err)
	}
	l := writeLimits{Write: write, Ceiling: ceiling, CeilingBest: bestCeiling(ceiling)}
	b.logf("%s: write ceiling %.0f records/s", s.name, l.CeilingBest.PerSecond)
	return l, nil
}

// Snapshot strategies, as CDC_SNAPSHOT_STRATEGY takes them.
const (
	strategyChunked = "chunked"
	strategyCopy    = "copy"
)

// strategyOrder is the order of the snapshot scenario's cdc runs: rounds runs per strategy,
// chunked, copy, copy, chunked, chunked, copy, ...
func strategyOrder(rounds int) []string {
	var order []string
	for r := range rounds {
		if r%2 == 0 {
			order = append(order, strategyChunked, strategyCopy)
		} else {
			order = append(order, strategyCopy, strategyChunked)
		}
	}
	return order
}

// setRuns combines each strategy's runs (chunked at the top level, copy in Copy) and pairs
// them by round for the per-round ratios.
func (r *snapshotResult) setRuns(chunked, cp []snapshotRun, rounds int) {
	r.StrategyRounds = rounds
	if len(chunked) > 0 {
		r.snapshotRun = combineSnapshotRuns(chunked)
		r.Limit = snapshotLimit(r.snapshotRun, runtime.NumCPU())
	} else {
		r.snapshotRun = snapshotRun{Strategy: strategyChunked}
	}
	if len(cp) > 0 {
		c := combineSnapshotRuns(cp)
		c.Limit = snapshotLimit(c, runtime.NumCPU())
		r.Copy = &c
	}
	r.StrategyRatios = nil
	for i := range min(len(chunked), len(cp)) {
		r.StrategyRatios = append(r.StrategyRatios, over(chunked[i].CDC.PerSecond, cp[i].CDC.PerSecond))
	}
	r.setRatios()
}

// setRatios sets each run's ratio to the limits and chunked over copy.
func (r *snapshotResult) setRatios() {
	r.Ratio = ratio(r.CDC.PerSecond, r.Read.PerSecond, r.Write.PerSecond)
	r.RatioFromProc = ratio(r.CDCFromStart.PerSecond, r.Read.PerSecond, r.Write.PerSecond)
	if c := r.Copy; c != nil {
		c.Ratio = ratio(c.CDC.PerSecond, r.Read.PerSecond, r.Write.PerSecond)
		c.RatioFromProc = ratio(c.CDCFromStart.PerSecond, r.Read.PerSecond, r.Write.PerSecond)
		r.RatioStrategy = over(r.CDC.PerSecond, c.CDC.PerSecond)
		r.RatioStrategyFromProc = over(r.CDCFromStart.PerSecond, c.CDCFromStart.PerSecond)
	}
}

// copyTable runs cdc with CDC_SNAPSHOT_STRATEGY=strategy on the scenario's table of rows rows, with a slot
// and a topic prefix of its own named after tag (under the scenario's, so that cleanup removes
// them), until the table is hydrated; then it stops cdc and reads back what it wrote. It
// returns the run, what the topic holds, and the topic. With prof, cdc runs with pprof on and
// prof takes a CPU profile of the copy.
func (s *scenario) copyTable(ctx context.Context, e change.ExportID, rows int64, strategy, tag string, extra map[string]string, prof *profiler) (snapshotRun, topicStats, string, error) {
	b := s.b
	run := snapshotRun{Strategy: strategy}
	slot, prefix := s.slot+"_"+tag, s.prefix+"."+tag
	topic := change.TopicName(prefix, e)
	b.logf("snapshot: cdc (CDC_TABLES=%s, CDC_SNAPSHOT_STRATEGY=%s, exactly-once, slot %s) %v", e, strategy, slot, extra)
	vars := map[string]string{
		"CDC_TABLES":            e.String(),
		"CDC_SNAPSHOT_STRATEGY": strategy,
		"CDC_SLOT":              slot,
		"CDC_TOPIC_PREFIX":      prefix,
		"CDC_SPILL_DIR":         filepath.Join(s.tmp, "spill-"+tag),
	}
	maps.Copy(vars, extra)
	if prof != nil {
		maps.Copy(vars, prof.vars())
	}
	readBefore, err := tupRead(ctx, s.db.url, e)
	if err != nil {
		return run, topicStats{}, topic, err
	}
	p, err := s.startCDC(vars)
	if err != nil {
		return run, topicStats{}, topic, err
	}
	defer p.stop(time.Minute)
	cpuBefore := b.svc.cpu.sample()
	if prof != nil {
		prof.start(ctx, p)
	}
	wmTopic := prefix + ".__watermarks"
	wt, err := b.watchCDC(ctx, p, wmTopic)
	if err != nil {
		return run, topicStats{}, topic, err
	}
	defer wt.close()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Hour)
	hydratedAt, err := wt.until(wctx, "hydration of "+e.String(), allHydrated(0, e), p.check)
	cancel()
	run.PostgresCPUSeconds, run.BrokerCPUSeconds, _ = b.svc.cpu.sample().since(cpuBefore)
	if err != nil {
		return run, topicStats{}, topic, err
	}
	rec := wt.snapshot()[e]
	if rec.Snapshot != nil && rec.Snapshot.Strategy != "" && rec.Snapshot.Strategy != strategy {
		return run, topicStats{}, topic, fmt.Errorf("cdc copied %s with strategy %q, not %q (log %s)", e, rec.Snapshot.Strategy, strategy, p.logPath)
	}
	if prof != nil {
		// The profile's window may outlast the copy by a little; cdc idles meanwhile.
		if _, err := prof.wait(ctx); err != nil {
			return run, topicStats{}, topic, err
		}
	}
	copyStart, ok := wt.firstSeen(e, watermark.StateHydrating)
	if rec.Snapshot != nil && !rec.Snapshot.StartedAt.IsZero() {
		copyStart = rec.Snapshot.StartedAt
	} else if !ok {
		copyStart = p.started
	}
	if err := p.stop(time.Minute); err != nil {
		return run, topicStats{}, topic, err
	}
	run.CPUSeconds, run.PeakRSSMiB = p.usage()
	readAfter, err := tupReadSettled(ctx, s.db.url, e)
	if err != nil {
		return run, topicStats{}, topic, err
	}
	run.RowsRead = readAfter.total() - readBefore.total()
	run.RowsReadIndex = readAfter.idx - readBefore.idx
	run.RowsReadRatio = float64(run.RowsRead) / float64(rows)
	stats, err := b.k.readBack(ctx, []string{topic}, nil, 20_000)
	if err != nil {
		return run, stats, topic, err
	}
	if stats.Records != rows {
		b.logf("snapshot: WARNING: topic %s holds %d records, the table %d rows", topic, stats.Records, rows)
	}
	run.CDC = newThroughput(stats.Records, stats.bytes(), hydratedAt.Sub(copyStart), "")
	run.CDCFromStart = newThroughput(stats.Records, stats.bytes(), hydratedAt.Sub(p.started), "")
	if rec.Snapshot != nil && rec.Snapshot.FinishedAt != nil {
		// The record's own clock: when the whole copy was durable, before the stream passed C.
		run.CDCCopied = newThroughput(stats.Records, stats.bytes(), rec.Snapshot.FinishedAt.Sub(copyStart), "")
	}
	run.CDCTxns, run.CDCPerTxn = stats.Transactions, stats.recordsPerTxn()
	b.logf("snapshot: cdc %s %.0f rows/s, %.1f MB/s (%d Kafka transactions; %.2fs from process start)",
		strategy, run.CDC.PerSecond, run.CDC.MBPerSecond, stats.Transactions, run.CDCFromStart.Seconds)
	return run, stats, topic, nil
}

type readResult struct {
	tp     throughput
	ranges int
}

// readLimit copies table the way the snapshot stage does (pkg/snapshot): one exported snapshot
// imported by up to workers REPEATABLE READ connections with the stage's session settings,
// the table split into the stage's ctid ranges, each range read with a text COPY of the same
// SELECT, and the output discarded. The clock runs from the first COPY to the last.
func readLimit(ctx context.Context, dbURL string, e change.ExportID, workers int) (readResult, error) {
	cfg, err := pgcat.ParseConfig(dbURL, pgcat.Timeouts{})
	if err != nil {
		return readResult{}, err
	}
	exporter, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return readResult{}, fmt.Errorf("connect: %w", err)
	}
	defer exporter.Close(context.Background())
	snapID, blocks, cols, err := exportTable(ctx, exporter, e)
	if err != nil {
		return readResult{}, err
	}
	ranges := snapshot.SplitRanges(blocks, snapshot.DefaultRangeBlocks)
	conns, err := importSnapshot(ctx, cfg, snapID, min(workers, len(ranges)))
	defer func() {
		for _, c := range conns {
			c.Close(context.Background())
		}
	}()
	if err != nil {
		return readResult{}, err
	}
	if _, err := exporter.Exec(ctx, "COMMIT"); err != nil {
		return readResult{}, err
	}
	tp, err := copyRanges(ctx, conns, e, cols, ranges)
	return readResult{tp: tp, ranges: len(ranges)}, err
}

// exportTable begins a REPEATABLE READ transaction on conn, exports its snapshot and returns the
// snapshot's id with the table's size in blocks and its columns.
func exportTable(ctx context.Context, conn *pgx.Conn, e change.ExportID) (snapID string, blocks int64, cols []string, err error) {
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return "", 0, nil, err
	}
	if err := conn.QueryRow(ctx, "SELECT pg_export_snapshot()").Scan(&snapID); err != nil {
		return "", 0, nil, fmt.Errorf("export snapshot: %w", err)
	}
	if err := conn.QueryRow(ctx, "SELECT pg_relation_size($1::regclass) / current_setting('block_size')::bigint",
		pgcat.Table(e)).Scan(&blocks); err != nil {
		return "", 0, nil, fmt.Errorf("size of %s: %w", e, err)
	}
	rows, err := conn.Query(ctx, `SELECT attname FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, pgcat.Table(e))
	if err != nil {
		return "", 0, nil, fmt.Errorf("columns of %s: %w", e, err)
	}
	if cols, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return "", 0, nil, fmt.Errorf("columns of %s: %w", e, err)
	}
	return snapID, blocks, cols, nil
}

// importSnapshot opens n connections, each in a REPEATABLE READ transaction on the exported
// snapshot snapID. It returns the connections it opened, also on error: the caller closes them.
func importSnapshot(ctx context.Context, cfg *pgx.ConnConfig, snapID string, n int) ([]*pgx.Conn, error) {
	conns := make([]*pgx.Conn, 0, n)
	for range n {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return conns, fmt.Errorf("connect worker: %w", err)
		}
		conns = append(conns, c)
		if _, err := c.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
			return conns, err
		}
		if _, err := c.Exec(ctx, fmt.Sprintf("SET TRANSACTION SNAPSHOT '%s'", snapID)); err != nil {
			return conns, fmt.Errorf("import snapshot: %w", err)
		}
	}
	return conns, nil
}

// copyRanges reads ranges of table e with a text COPY each, one connection of conns a worker,
// discarding the output; the clock runs from the first COPY to the last.
func copyRanges(ctx context.Context, conns []*pgx.Conn, e change.ExportID, cols []string, ranges []snapshot.Range) (throughput, error) {
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	queue := make(chan snapshot.Range, len(ranges))
	for _, r := range ranges {
		queue <- r
	}
	close(queue)
	var total, bytes atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	start := time.Now()
	for i, c := range conns {
		wg.Go(func() {
			cw := &countingWriter{}
			for r := range queue {
				sql := "COPY (SELECT " + strings.Join(quoted, ", ") + " FROM ONLY " + pgcat.Table(e)
				if p := r.Predicate(); p != "" {
					sql += " WHERE " + p
				}
				sql += ") TO STDOUT"
				tag, err := c.PgConn().CopyTo(ctx, cw, sql)
				if err != nil {
					errs[i] = fmt.Errorf("copy %s %s: %w", e, r, err)
					return
				}
				total.Add(tag.RowsAffected())
			}
			bytes.Add(cw.n)
		})
	}
	wg.Wait()
	d := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return throughput{}, err
	}
	return newThroughput(total.Load(), bytes.Load(), d, ""), nil
}

// countingWriter discards what it is given and counts the bytes.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// pgScalar runs a one-value query on its own connection.
func pgScalar(ctx context.Context, dbURL, sql string, dst any, args ...any) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, sql, args...).Scan(dst); err != nil {
		return fmt.Errorf("%s: %w", testsvc.Abbreviate(sql, 80), err)
	}
	return nil
}
