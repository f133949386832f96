package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
)

// bench holds what every scenario shares.
type bench struct {
	o    options
	svc  *services
	k    *kafkaClient
	bin  string // the cdc binary
	work string // logs and temporary files
	logf func(format string, args ...any)
	// getenv is the bench's environment (the registry of the formats scenario).
	getenv func(string) string
	runs   int // cdc processes started, to name their logs
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	started := time.Now()
	if o.selfProfile != "" {
		f, err := os.Create(o.selfProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "bench %s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	if o.instructions {
		root, err := testsvc.RepoRoot()
		if err != nil {
			return err
		}
		return instructions(ctx, root, o.out, stdout, logf)
	}
	b, release, err := newBench(ctx, o, getenv, logf)
	if err != nil {
		return err
	}
	defer release()
	res := &results{
		StartedAt: started.UTC(),
		Command:   commandLine(args),
		Host: map[string]string{
			"cpus": fmt.Sprint(runtime.NumCPU()), "go": runtime.Version(),
			"os": runtime.GOOS + "/" + runtime.GOARCH, "pg_server": b.serverVersion(ctx),
		},
		Services:  b.svc.source,
		Broker:    b.svc.broker,
		WorkDir:   b.work,
		HostSteal: make(map[string]float64),
	}
	runCPU := readHostCPU()
	for _, sc := range b.scenarios() {
		if !o.wants(sc.name) || ctx.Err() != nil {
			continue
		}
		h := readHostCPU()
		if err := sc.run(ctx, res); err != nil {
			logf("%s: %v", sc.name, err)
			res.Errors = append(res.Errors, sc.name+": "+err.Error())
		}
		b.steal(res, sc.name, h)
	}
	if ctx.Err() != nil {
		res.Errors = append(res.Errors, "interrupted: "+ctx.Err().Error())
	}
	b.steal(res, "run", runCPU)
	res.WallSeconds = time.Since(started).Seconds()
	res.print(stdout)
	if err := res.writeJSON(o.out); err != nil {
		return err
	}
	logf("results written to %s; cdc logs in %s", o.out, b.work)
	if len(res.Errors) > 0 {
		return fmt.Errorf("%d scenario(s) failed", len(res.Errors))
	}
	return nil
}

// newBench makes the work folder, builds cdc, acquires the services and connects to Kafka;
// release stops what it started.
func newBench(ctx context.Context, o options, getenv func(string) string, logf func(string, ...any)) (*bench, func(), error) {
	root, err := testsvc.RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	work, err := os.MkdirTemp("", "tidemark-bench-")
	if err != nil {
		return nil, nil, fmt.Errorf("create work folder: %w", err)
	}
	if err := os.Chmod(work, 0o755); err != nil {
		return nil, nil, fmt.Errorf("chmod work folder: %w", err)
	}
	logf("work folder (cdc logs) %s", work)
	logf("building bin/cdc")
	bin, err := buildCDC(ctx, root, work)
	if err != nil {
		return nil, nil, err
	}
	svc, err := acquireServices(ctx, filepath.Join(work, "services"), o, getenv, logf)
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := svc.stop(sctx); err != nil {
			logf("stop services: %v", err)
		}
	}
	k, err := newKafkaClient(svc.brokers, o.benchCodec())
	if err != nil {
		stop()
		return nil, nil, err
	}
	b := &bench{o: o, svc: svc, k: k, bin: bin, work: work, logf: logf, getenv: getenv}
	return b, func() { k.close(); stop() }, nil
}

// scenarioRun is one scenario of a run: run stores its result in res, partial results included.
type scenarioRun struct {
	name string
	run  func(ctx context.Context, res *results) error
}

// scenarios are every scenario in the order a run takes them.
func (b *bench) scenarios() []scenarioRun {
	return []scenarioRun{
		{scenarioSnapshot, into(b.snapshot, func(r *results) **snapshotResult { return &r.Snapshot })},
		{scenarioStream, into(b.stream, func(r *results) **streamResult { return &r.Stream })},
		{scenarioLag, b.lagModes},
		{scenarioCompression, into(b.compression, func(r *results) *[]compressionResult { return &r.Compression })},
		{scenarioFormats, into(b.formats, func(r *results) **formatsResult { return &r.Formats })},
		{scenarioTables, into(b.tables, func(r *results) **tablesResult { return &r.Tables })},
		{scenarioMany, into(b.many, func(r *results) **manyResult { return &r.Many })},
		{scenarioMemory, into(b.memory, func(r *results) **memoryResult { return &r.Memory })},
		{scenarioCopies, into(b.copies, func(r *results) **scaleResult { return &r.Copies })},
		{scenarioCopyCatchUp, into(b.copyCatchUp, func(r *results) **scaleResult { return &r.CopyCatchUp })},
		{scenarioDebezium, b.debeziumFormats},
	}
}

// into runs a scenario and stores its result, partial or not, in the field of results that
// field points to.
func into[T any](scenario func(context.Context) (T, error), field func(*results) *T) func(context.Context, *results) error {
	return func(ctx context.Context, res *results) error {
		v, err := scenario(ctx)
		*field(res) = v
		return err
	}
}

// lagModes runs the lag scenario in both watermark modes; a failed mode does not stop the other.
func (b *bench) lagModes(ctx context.Context, res *results) error {
	res.Lag = make(map[string]lagResult)
	if b.o.lagRows < 2_000_000 {
		b.logf("lag: %s rows may copy in under 10s here; 2-3M rows give a long enough window", thousands(b.o.lagRows))
	}
	var errs []error
	for _, mode := range []string{"independent", "global"} {
		if ctx.Err() != nil {
			break
		}
		l, err := b.lag(ctx, mode, b.o.lagRows)
		if err != nil {
			b.logf("%s %s: %v", scenarioLag, mode, err)
			errs = append(errs, fmt.Errorf("%s: %w", mode, err))
			continue
		}
		res.Lag[mode] = *l
	}
	return errors.Join(errs...)
}

// steal records the host CPU steal since before under name.
func (b *bench) steal(res *results, name string, before hostCPU) {
	if p, ok := readHostCPU().stealPercent(before); ok {
		res.HostSteal[name] = math.Round(p*10) / 10
		b.logf("%s: host CPU steal %.1f%% (time the hypervisor gave other guests)", name, p)
	}
}

func commandLine(args []string) string {
	return strings.TrimSpace("go run ./tools/bench " + strings.Join(args, " "))
}

func (b *bench) serverVersion(ctx context.Context) string {
	conn, err := pgx.Connect(ctx, b.svc.pgURL)
	if err != nil {
		return "unknown"
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "unknown"
	}
	return v
}

// scenario is one scenario's own database, topic prefix, slot and publication.
type scenario struct {
	b      *bench
	name   string
	db     *database
	prefix string
	slot   string
	pub    string
	tmp    string
}

func (b *bench) newScenario(ctx context.Context, name string) (*scenario, error) {
	db, err := b.newDB(ctx, name)
	if err != nil {
		return nil, err
	}
	id := testsvc.RandomHex(3)
	tmp := filepath.Join(b.work, name+"-"+id)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", tmp, err)
	}
	return &scenario{
		b: b, name: name, db: db, tmp: tmp,
		prefix: "bench_" + name + "_" + id,
		slot:   "bench_" + name + "_" + id,
		pub:    "bench_pub",
	}, nil
}

func (b *bench) newDB(ctx context.Context, tag string) (*database, error) {
	return newDatabase(ctx, b.svc.pgURL, strings.ReplaceAll(tag, "-", "_"))
}

// cleanup drops the database and the scenario's topics.
func (s *scenario) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.db.drop(ctx); err != nil {
		s.b.logf("cleanup: %v", err)
	}
	if err := testsvc.DeleteTopics(ctx, s.b.k.adm, s.prefix+"."); err != nil {
		s.b.logf("cleanup: %v", err)
	}
}

// vars is cdc's environment for this scenario, plus extra.
func (s *scenario) vars(extra map[string]string) map[string]string {
	v := map[string]string{
		"CDC_PG_URL":           s.db.url,
		"CDC_KAFKA_BROKERS":    strings.Join(s.b.svc.brokers, ","),
		"CDC_PUBLICATION":      s.pub,
		"CDC_SLOT":             s.slot,
		"CDC_TOPIC_PREFIX":     s.prefix,
		"CDC_SNAPSHOT_WORKERS": fmt.Sprint(s.b.o.workers),
		"CDC_LOG_FORMAT":       "text",
		"CDC_LOG_LEVEL":        s.b.o.cdcLogLevel,
		"CDC_SPILL_DIR":        filepath.Join(s.tmp, "spill"),
		// cdc runs with its defaults (lz4) unless -codec says otherwise; the compression
		// scenario sets each codec in turn. The WRITE limits use the same codec.
		"CDC_KAFKA_COMPRESSION": s.b.o.benchCodec(),
	}
	for k, x := range extra {
		v[k] = x
	}
	for k, x := range s.b.o.cdcEnv {
		v[k] = x
	}
	return v
}

// cdcEnvFlag is -cdc-env: NAME=value pairs, repeatable.
type cdcEnvFlag map[string]string

func (f *cdcEnvFlag) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(*f)) {
		parts = append(parts, k+"="+(*f)[k])
	}
	return strings.Join(parts, ",")
}

func (f *cdcEnvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want NAME=value", s)
	}
	if *f == nil {
		*f = cdcEnvFlag{}
	}
	(*f)[k] = v
	return nil
}

// startCDC starts cdc with the scenario's environment; its log goes to the work folder.
func (s *scenario) startCDC(extra map[string]string) (*cdcProc, error) {
	return s.startCDCBin(s.b.bin, extra)
}

// startCDCBin is startCDC with another cdc binary.
func (s *scenario) startCDCBin(bin string, extra map[string]string) (*cdcProc, error) {
	s.b.runs++
	logPath := filepath.Join(s.b.work, fmt.Sprintf("%02d-%s-cdc.log", s.b.runs, s.name))
	p, err := startCDC(bin, logPath, s.tmp, s.vars(extra))
	if err != nil {
		return nil, err
	}
	s.b.logf("%s: cdc started (log %s)", s.name, logPath)
	return p, nil
}

func (s *scenario) watermarkTopic() string { return s.prefix + ".__watermarks" }

func (s *scenario) topic(e change.ExportID) string { return change.TopicName(s.prefix, e) }

// currentLSN returns pg_current_wal_lsn().
func currentLSN(ctx context.Context, conn *pgx.Conn) (change.LSN, error) {
	var txt string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&txt); err != nil {
		return 0, fmt.Errorf("read WAL position: %w", err)
	}
	return change.ParseLSN(txt)
}

func exportID(table string) change.ExportID {
	e, err := change.ParseExportID(table)
	if err != nil {
		panic(err) // the bench's own table names
	}
	return e
}
