package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
)

// The debezium scenario (-only debezium, `make bench-debezium`) runs Tidemark and Debezium's
// PostgreSQL connector one after another on the same pgbench database, broker and topic layout
// (one partition per topic), each measured from its process start, after one unmeasured
// Tidemark copy that warms the broker (the first run after its start is slower):
//
//   - snapshot: each tool copies the four pgbench tables through a slot of its own; rows/s is
//     the tables' rows over the time from process start until they are all in the topics
//     (Tidemark: its watermarks say every table is hydrated, which it writes only once the rows
//     are committed; Debezium: the topics' end offsets hold every row, polled every 100ms).
//   - catch-up: a pgbench backlog written while every tool is stopped (each slot holds all of
//     it), then each tool restarted alone and timed until its topics hold every change of the
//     backlog (Tidemark: watermarks reach the WAL position after the backlog, then the records
//     are counted; Debezium: end offsets).
//
// Debezium runs in a Kafka Connect standalone worker (ConnectStandalone, the JVM flags of
// Kafka's kafka-run-class.sh and connect-standalone.sh), with JsonConverter and
// schemas.enable=false for keys and values (plain JSON, like Tidemark's default CDC_VALUE_FORMAT
// json), pgoutput, snapshot.mode=initial, a filtered publication of its own, and the
// connector's other settings at their defaults. It runs twice, on slots of its own: with the
// producer Connect configures for source tasks (acks=all, max.in.flight.requests.per.connection=1,
// Kafka's defaults otherwise) and with producer settings matched to Tidemark's sink
// (debeziumMatchedProducer). CPU seconds and peak RSS of each process come from getrusage of the
// exited process (the JVM's own, for Connect).

// debeziumVersion is the connector scripts/services.sh install-debezium fetches.
const debeziumVersion = "3.6.1.Final"

// connectJVM are the worker's JVM flags: kafka-run-class.sh's defaults with
// connect-standalone.sh's heap.
var connectJVM = []string{"-Xms256m", "-Xmx2g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
	"-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"}

// debeziumMatchedProducer are worker properties that give Connect's producer Tidemark's sink
// settings (pkg/sink producerOpts): acks=all, idempotence with 5 requests in flight (franz-go's
// idempotent producer), a 5ms linger, 32 MiB of buffer, 1 MiB batches, and Tidemark's codec
// (matchedProducer sets compression.type to it: -codec, or cdc's default lz4).
// The profile also sets plugin.discovery=service_load, which the worker itself recommends at
// start-up ("All plugins have ServiceLoader manifests"): it skips the scan of every jar for
// plugins, seconds of Connect's start-up here.
var debeziumMatchedProducer = map[string]string{
	"plugin.discovery":                               "service_load",
	"producer.acks":                                  "all",
	"producer.enable.idempotence":                    "true",
	"producer.max.in.flight.requests.per.connection": "5",
	"producer.linger.ms":                             "5",
	"producer.batch.size":                            strconv.Itoa(1 << 20),
	"producer.buffer.memory":                         strconv.Itoa(32 << 20),
}

// matchedProducer is debeziumMatchedProducer with Kafka's producer codec set to codec (whose
// names are the same as CDC_KAFKA_COMPRESSION's).
func matchedProducer(codec string) map[string]string {
	m := maps.Clone(debeziumMatchedProducer)
	m["producer.compression.type"] = codec
	return m
}

// Debezium profiles.
const (
	profileDefault = "default"
	profileMatched = "matched"
)

// debeziumResult is the scenario's outcome.
type debeziumResult struct {
	Scale       int            `json:"pgbench_scale"`
	Rows        int64          `json:"snapshot_rows"`
	BacklogTxns int64          `json:"backlog_transactions"`
	Changes     int64          `json:"backlog_changes"`
	Debezium    string         `json:"debezium_version"`
	ConnectJVM  string         `json:"connect_jvm_flags"`
	Format      string         `json:"format"` // CDC_VALUE_FORMAT of Tidemark, and Debezium's converter's format
	Converter   string         `json:"converter"`
	Tools       []debeziumTool `json:"tools"`
	// Ratios are Tidemark's rate over each Debezium profile's, by profile.
	SnapshotRatio map[string]float64 `json:"snapshot_ratio_tidemark_over_debezium"`
	CatchUpRatio  map[string]float64 `json:"catch_up_ratio_tidemark_over_debezium"`
	// The backlog read from slots of their own, with nothing published: no client of the slot
	// catches up faster than the server sends (changes/s).
	ReadGo          float64 `json:"catch_up_read_limit_go"`
	ReadRecvlogical float64 `json:"catch_up_read_limit_pg_recvlogical"`
	Cores           int     `json:"cores"`
}

// debeziumTool is one tool (or Debezium profile) measured in both phases.
type debeziumTool struct {
	Name     string            `json:"name"`
	Profile  string            `json:"profile,omitempty"`
	Producer map[string]string `json:"producer_overrides,omitempty"`
	Snapshot toolRun           `json:"snapshot"`
	CatchUp  toolRun           `json:"catch_up"`
}

// toolRun is one timed process run.
type toolRun struct {
	Count      int64   `json:"count"`   // rows or changes expected
	Records    int64   `json:"records"` // records counted in the topics
	Seconds    float64 `json:"seconds_from_process_start"`
	PerSecond  float64 `json:"per_second"`
	CPUSeconds float64 `json:"cpu_seconds"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// The servers' CPU while the tool ran (the bench's own servers only).
	PostgresCPUSeconds float64 `json:"postgres_cpu_seconds,omitempty"`
	BrokerCPUSeconds   float64 `json:"broker_cpu_seconds,omitempty"`
	// WalsenderCPUSeconds is the CPU of the walsender serving the tool's slot (Tidemark's
	// catch-up only).
	WalsenderCPUSeconds float64 `json:"walsender_cpu_seconds,omitempty"`
}

func newToolRun(count, records int64, d time.Duration, p *cdcProc) toolRun {
	r := toolRun{Count: count, Records: records, Seconds: d.Seconds()}
	if r.Seconds > 0 {
		r.PerSecond = float64(count) / r.Seconds
	}
	r.CPUSeconds, r.PeakRSSMiB = p.usage()
	return r
}

// debezium runs the scenario with both tools writing format (json or avro).
func (b *bench) debezium(ctx context.Context, format string) (*debeziumResult, error) {
	root, err := testsvc.RepoRoot()
	if err != nil {
		return nil, err
	}
	lib, plugins, err := debeziumJars(root)
	if err != nil {
		return nil, err
	}
	dc, err := b.debeziumConverter(ctx, format, plugins)
	if err != nil {
		return nil, err
	}
	defer dc.stop()
	s, err := b.newScenario(ctx, scenarioDebezium)
	if err != nil {
		return nil, err
	}
	defer s.cleanup()
	res := &debeziumResult{Scale: b.o.debeziumScale, Debezium: debeziumVersion, Cores: runtime.NumCPU(),
		ConnectJVM: strings.Join(connectJVM, " "), Format: format, Converter: dc.name}

	pgbench, conn, exports, err := s.pgbenchInit(ctx, b.o.debeziumScale)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	if res.Rows, err = countRows(ctx, conn, pgbenchTables); err != nil {
		return res, err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Hour)
	defer cancel()

	tm, tmRes, err := s.tidemarkSnapshot(wctx, conn, exports, res.Rows, dc.cdc)
	if tm != nil {
		defer tm.close()
	}
	if err != nil {
		return res, err
	}
	workers := []*connectWorker{
		s.newConnectWorker(lib, dc.plugins, profileDefault, nil, dc.worker),
		s.newConnectWorker(lib, dc.plugins, profileMatched, matchedProducer(s.b.o.benchCodec()), dc.worker),
	}
	dzRes := make([]debeziumTool, len(workers))
	for i, w := range workers {
		dzRes[i] = debeziumTool{Name: "Debezium " + debeziumVersion + ", " + w.profile + " producer",
			Profile: w.profile, Producer: w.producer}
		if err := b.k.createTopics(wctx, w.topics); err != nil {
			return res, err
		}
		if dzRes[i].Snapshot, err = w.run(wctx, "snapshot", res.Rows); err != nil {
			return res, fmt.Errorf("debezium %s snapshot: %w", w.profile, err)
		}
		b.logf("debezium: Debezium (%s producer) snapshot %.0f rows/s from process start", w.profile, dzRes[i].Snapshot.PerSecond)
	}

	target, err := s.debeziumBacklog(wctx, conn, pgbench, res)
	if err != nil {
		return res, err
	}

	// Catch-ups, each tool alone.
	cu, _, err := tm.catchUp(wctx, target, res.Changes)
	if err != nil {
		return res, fmt.Errorf("tidemark catch-up: %w", err)
	}
	tmRes.CatchUp = toolRun{Count: res.Changes, Records: cu.CDCRecords, Seconds: cu.CDC.Seconds,
		PerSecond: cu.CDC.PerSecond, CPUSeconds: cu.CPUSeconds, PeakRSSMiB: cu.PeakRSSMiB,
		PostgresCPUSeconds: cu.PostgresCPUSeconds, BrokerCPUSeconds: cu.BrokerCPUSeconds,
		WalsenderCPUSeconds: cu.WalsenderCPUSeconds}
	for i, w := range workers {
		if dzRes[i].CatchUp, err = w.run(wctx, "catch-up", res.Changes); err != nil {
			return res, fmt.Errorf("debezium %s catch-up: %w", w.profile, err)
		}
		b.logf("debezium: Debezium (%s producer) catch-up %.0f changes/s from process start", w.profile, dzRes[i].CatchUp.PerSecond)
	}
	res.Tools = append([]debeziumTool{tmRes}, dzRes...)
	res.SnapshotRatio, res.CatchUpRatio = make(map[string]float64), make(map[string]float64)
	for _, d := range dzRes {
		res.SnapshotRatio[d.Profile] = over(tmRes.Snapshot.PerSecond, d.Snapshot.PerSecond)
		res.CatchUpRatio[d.Profile] = over(tmRes.CatchUp.PerSecond, d.CatchUp.PerSecond)
	}
	return res, nil
}

// countRows is the number of rows of tables.
func countRows(ctx context.Context, conn *pgx.Conn, tables []string) (int64, error) {
	var total int64
	for _, t := range tables {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+t).Scan(&n); err != nil {
			return total, fmt.Errorf("count %s: %w", t, err)
		}
		total += n
	}
	return total, nil
}

// tidemarkSnapshot runs Tidemark's snapshot: first one unmeasured copy that warms the broker
// (the first run after its start is slower, whatever the tool; its slot is dropped, its topics
// stay until cleanup), then the measured copy on a slot of its own. It returns the measured
// lane, which the catch-up runs again, and its figures.
func (s *scenario) tidemarkSnapshot(ctx context.Context, conn *pgx.Conn, exports []change.ExportID, rows int64, vars map[string]string) (*lane, debeziumTool, error) {
	tmRes := debeziumTool{Name: "Tidemark, exactly-once"}
	if f := vars["CDC_VALUE_FORMAT"]; f != "" {
		tmRes.Name += ", " + f
	}
	warm := s.newLane(deliveryExactlyOnce, "warmup", exports)
	maps.Copy(warm.vars, vars)
	s.b.logf("debezium: unmeasured warm-up copy")
	err := warm.hydrate(ctx, conn)
	warm.close()
	if err != nil {
		return nil, tmRes, fmt.Errorf("warm-up: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", warm.vars["CDC_SLOT"]); err != nil {
		return nil, tmRes, fmt.Errorf("drop warm-up slot: %w", err)
	}
	tm := s.newLane(deliveryExactlyOnce, "", exports)
	maps.Copy(tm.vars, vars)
	if tmRes.Snapshot, err = tm.timedHydrate(ctx, conn, rows); err != nil {
		return tm, tmRes, fmt.Errorf("tidemark snapshot: %w", err)
	}
	s.b.logf("debezium: Tidemark snapshot %.0f rows/s from process start", tmRes.Snapshot.PerSecond)
	return tm, tmRes, nil
}

// debeziumBacklog writes the pgbench backlog while every tool is stopped (each slot holds all of
// it), then measures the READ limits on slots of their own made before it: the backlog read by
// the Go reader and by pg_recvlogical, nothing else running. 10x Debezium's catch-up is out of
// reach wherever it is above both. It returns the WAL position after the backlog.
func (s *scenario) debeziumBacklog(ctx context.Context, conn *pgx.Conn, pgbench string, res *debeziumResult) (change.LSN, error) {
	readSlot, recvSlot := s.slot+"_dbzread", s.slot+"_dbzrecv"
	readStart, err := createReadSlots(ctx, conn, readSlot, recvSlot)
	if err != nil {
		return 0, err
	}
	if res.BacklogTxns, err = s.pgbenchBacklog(ctx, pgbench, s.b.o.debeziumTxns); err != nil {
		return 0, err
	}
	// tpcb-like: three updates and one insert per transaction.
	res.Changes = 4 * res.BacklogTxns
	// The backlog's dirty pages and dead rows would otherwise be the first catch-up's burden.
	if err := s.db.exec(ctx, "VACUUM ANALYZE", "CHECKPOINT"); err != nil {
		return 0, err
	}
	target, err := currentLSN(ctx, conn)
	if err != nil {
		return 0, err
	}
	rd, err := readStream(ctx, s.db.url, readSlot, s.pub, readStart, res.BacklogTxns)
	if err != nil {
		return 0, fmt.Errorf("read limit: %w", err)
	}
	if rd.elapsed > 0 {
		res.ReadGo = float64(rd.changes) / rd.elapsed.Seconds()
	}
	elapsed, err := readRecvlogical(ctx, s.db.url, recvSlot, s.pub, rd.lastEnd)
	if err != nil {
		return 0, fmt.Errorf("pg_recvlogical read limit: %w", err)
	}
	if elapsed > 0 {
		res.ReadRecvlogical = float64(rd.changes) / elapsed.Seconds()
	}
	for _, slot := range []string{readSlot, recvSlot} {
		if err := dropSlot(ctx, conn, slot); err != nil {
			return 0, err
		}
	}
	s.b.logf("debezium: READ limit %.0f changes/s (Go reader), %.0f (pg_recvlogical)", res.ReadGo, res.ReadRecvlogical)
	return target, nil
}

// timedHydrate is lane.hydrate timed from cdc's start: the time until every table is hydrated.
func (l *lane) timedHydrate(ctx context.Context, conn *pgx.Conn, rows int64) (toolRun, error) {
	b := l.s.b
	b.logf("debezium: Tidemark (%s, slot %s) copies %s", l.delivery, l.vars["CDC_SLOT"], strings.Join(pgbenchTables, ", "))
	p, err := l.s.startCDC(l.vars)
	if err != nil {
		return toolRun{}, err
	}
	defer p.stop(time.Minute)
	cpuBefore := b.svc.cpu.sample()
	if l.wt, err = b.watchCDC(ctx, p, l.watermarkTopic()); err != nil {
		return toolRun{}, err
	}
	doneAt, err := l.wt.until(ctx, "hydration", allHydrated(0, l.exports...), p.check)
	if err != nil {
		return toolRun{}, err
	}
	pgCPU, brokerCPU, _ := b.svc.cpu.sample().since(cpuBefore)
	now, err := currentLSN(ctx, conn)
	if err != nil {
		return toolRun{}, err
	}
	if _, err := l.wt.until(ctx, "watermarks >= "+now.String(), allHydrated(now, l.exports...), p.check); err != nil {
		return toolRun{}, err
	}
	if err := p.stop(time.Minute); err != nil {
		return toolRun{}, err
	}
	stats, err := b.k.readBack(ctx, l.topics, nil, 0)
	if err != nil {
		return toolRun{}, err
	}
	if stats.Records != rows {
		b.logf("debezium: WARNING: Tidemark wrote %d records for %d rows", stats.Records, rows)
	}
	if l.start, err = b.k.endOffsets(ctx, l.topics...); err != nil {
		return toolRun{}, err
	}
	run := newToolRun(rows, stats.Records, doneAt.Sub(p.started), p)
	run.PostgresCPUSeconds, run.BrokerCPUSeconds = pgCPU, brokerCPU
	return run, nil
}

// print writes the side-by-side table.
func (r *debeziumResult) print(w io.Writer) {
	fmt.Fprintf(w, "\n--- Tidemark against Debezium %s, %s (pgbench scale %d: %s rows; backlog %s transactions = %s changes; one partition per topic) ---\n",
		r.Debezium, r.Format, r.Scale, thousands(r.Rows), thousands(r.BacklogTxns), thousands(r.Changes))
	fmt.Fprintf(w, "%-44s %16s %19s %18s %16s\n", "tool (from process start)", "snapshot rows/s", "catch-up changes/s", "CPU s (snap/cu)", "peak RSS MiB")
	for _, t := range r.Tools {
		fmt.Fprintf(w, "%-44s %16s %19s %18s %16s\n", t.Name,
			thousands(int64(t.Snapshot.PerSecond)), thousands(int64(t.CatchUp.PerSecond)),
			fmt.Sprintf("%.1f / %.1f", t.Snapshot.CPUSeconds, t.CatchUp.CPUSeconds),
			fmt.Sprintf("%.0f / %.0f", t.Snapshot.PeakRSSMiB, t.CatchUp.PeakRSSMiB))
	}
	for _, p := range []string{profileDefault, profileMatched} {
		if _, ok := r.SnapshotRatio[p]; !ok {
			continue
		}
		fmt.Fprintf(w, "Tidemark / Debezium (%s producer): snapshot %.1fx, catch-up %.1fx\n", p, r.SnapshotRatio[p], r.CatchUpRatio[p])
	}
	fmt.Fprintf(w, "Debezium: Kafka Connect 4.1.1 standalone, JVM %s; %s\n", r.ConnectJVM, r.Converter)
	r.printLimits(w)
	r.printReach(w)
}

// printReach says whether 10x Debezium's best run is within this machine's reach: the
// catch-up against the slot's read limits, and both phases against the CPU that Tidemark's run
// cost per record.
func (r *debeziumResult) printReach(w io.Writer) {
	if len(r.Tools) < 2 {
		return
	}
	tm := r.Tools[0]
	var bestSnap, bestCU float64
	for _, t := range r.Tools[1:] {
		bestSnap, bestCU = max(bestSnap, t.Snapshot.PerSecond), max(bestCU, t.CatchUp.PerSecond)
	}
	if read := max(r.ReadGo, r.ReadRecvlogical); read > 0 && bestCU > 0 {
		verdict := "within the read limit"
		if 10*bestCU > read {
			verdict = "above the read limit: no client of the slot catches up that fast on this machine"
		}
		fmt.Fprintf(w, "Catch-up reach: READ limit %s changes/s (Go reader) and %s (pg_recvlogical), Tidemark at %.2f of the faster; 10x Debezium's best is %s changes/s, %s\n",
			thousands(int64(r.ReadGo)), thousands(int64(r.ReadRecvlogical)), tm.CatchUp.PerSecond/read, thousands(int64(10*bestCU)), verdict)
	}
	printCoresAt10x(w, "Snapshot", "rows", tm.Snapshot, bestSnap, r.Cores)
	printCoresAt10x(w, "Catch-up", "changes", tm.CatchUp, bestCU, r.Cores)
}

// printCoresAt10x prints the cores that 10x Debezium's best rate would take at the CPU per
// record that cdc, PostgreSQL and the broker spent in Tidemark's run, and the servers' part.
func printCoresAt10x(w io.Writer, phase, unit string, tm toolRun, best float64, cores int) {
	servers := tm.PostgresCPUSeconds + tm.BrokerCPUSeconds
	if servers <= 0 || tm.Count <= 0 || best <= 0 || cores <= 0 {
		return
	}
	per := 1e6 / float64(tm.Count)
	rate := 10 * best
	all := (servers + tm.CPUSeconds) / float64(tm.Count) * rate
	alone := servers / float64(tm.Count) * rate
	verdict := "within the machine's cores"
	switch {
	case alone > float64(cores):
		verdict = "more cores than the machine has, before cdc spends any"
	case all > float64(cores):
		verdict = "more cores than the machine has"
	}
	fmt.Fprintf(w, "%s reach: Tidemark's run cost cdc %.2f s, PostgreSQL %.2f s and the broker %.2f s of CPU per 1,000,000 %s; at that cost 10x Debezium's best (%s %s/s) needs %.2f cores, %.2f of them for the two servers, of %d: %s\n",
		phase, tm.CPUSeconds*per, tm.PostgresCPUSeconds*per, tm.BrokerCPUSeconds*per, unit,
		thousands(int64(rate)), unit, all, alone, cores, verdict)
}
