package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tidemark/cdc/pkg/sink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	quietTables     int
	manyTables      int
	manyProfile     int
	manyProfileFrom int
	tablesWindow    time.Duration
	memoryRows      int64
	memoryTxns      int
	compressionRows int64
	compressionTxns int
	rows            int64
	txns            int
	workers         int
	only            string
	out             string
	lagRows         int64
	lagStrategy     string
	lagRate         int
	scale           int
	deliveryRounds  int
	snapshotRounds  int
	clients         int
	keep            bool
	kafkaHeap       string
	cdcLogLevel     string
	cdcEnv          cdcEnvFlag
	debeziumScale   int
	debeziumTxns    int
	instructions    bool
	profileRounds   int
	copiesTables    int
	copies          int
	copiesRows      int64
	catchupCopyRows int64
	catchupTxns     int
	scaleWMInterval string
	abBin           string
	abRounds        int
	pin             bool
	cluster         bool
	codec           string
	selfProfile     string
	formatsRows     int64
	formatsTxns     int
	formatsRounds   int
	debeziumFormats string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Int64Var(&o.rows, "rows", 1_000_000, "rows of the snapshot table")
	fs.IntVar(&o.txns, "txns", 100_000, "pgbench transactions in the streaming backlog")
	fs.IntVar(&o.workers, "workers", 4, "snapshot workers (CDC_SNAPSHOT_WORKERS and the READ limit's COPY connections)")
	fs.StringVar(&o.only, "only", "", "run one scenario only: snapshot, stream, lag, compression, formats, memory, tables, many, copies or copy-catchup; or debezium (only with -only: Tidemark against Debezium, `make bench-debezium`)")
	fs.IntVar(&o.debeziumScale, "debezium-scale", 10, "pgbench scale factor of the debezium scenario (100000 accounts each)")
	fs.IntVar(&o.debeziumTxns, "debezium-txns", 100_000, "pgbench transactions in the debezium scenario's catch-up backlog")
	fs.StringVar(&o.debeziumFormats, "debezium-formats", "json,avro", "value formats of the debezium scenario, each a run of its own: json (Tidemark's json, Debezium's JsonConverter), avro (Tidemark's avro, Apicurio Registry's AvroConverter, one registry)")
	fs.IntVar(&o.quietTables, "quiet-tables", 990, "quiet tables (10 rows, never written) beside 10 busy ones in the tables scenario")
	fs.IntVar(&o.manyTables, "many-tables", 10_000, "tables of 10 rows in the many scenario (FOR ALL TABLES, beside one busy table)")
	fs.IntVar(&o.manyProfileFrom, "many-profile-from", 0, "seconds after cdc's start at which -many-profile begins")
	fs.IntVar(&o.manyProfile, "many-profile", 0, "seconds of cdc CPU profile in the many scenario from its start (0: none; at most 120); kept in the work folder as many-cpu.pprof")
	fs.DurationVar(&o.tablesWindow, "tables-window", 20*time.Second, "steady-state window of the tables scenario")
	fs.Int64Var(&o.memoryRows, "memory-rows", 10_000_000, "rows of the big table copied in the memory scenario")
	fs.IntVar(&o.memoryTxns, "memory-txns", 1_000_000, "pgbench transactions of the backlog caught up in the memory scenario")
	fs.IntVar(&o.copiesTables, "copies-tables", 1000, "tables in the copies scenario (10 busy, -copies copied at once, the rest quiet)")
	fs.IntVar(&o.copies, "copies", 10, "tables added to the publication at once in the copies scenario")
	fs.Int64Var(&o.copiesRows, "copies-rows", 200_000, "rows of each table copied in the copies scenario")
	fs.Int64Var(&o.catchupCopyRows, "catchup-copy-rows", 10_000_000, "rows of the table copied beside the catch-up in the copy-catchup scenario")
	fs.IntVar(&o.catchupTxns, "catchup-txns", 100_000, "pgbench transactions of the backlog caught up beside the copy in the copy-catchup scenario")
	fs.StringVar(&o.scaleWMInterval, "scale-watermark-interval", "", "CDC_WATERMARK_INTERVAL of the copies and copy-catchup scenarios (empty: cdc's default, 1s)")
	fs.Int64Var(&o.compressionRows, "compression-rows", 300_000, "rows of the table each codec copies in the compression scenario")
	fs.IntVar(&o.compressionTxns, "compression-txns", 20_000, "pgbench transactions each codec catches up in the compression scenario")
	fs.Int64Var(&o.formatsRows, "formats-rows", 300_000, "rows of the table each value format copies in the formats scenario")
	fs.IntVar(&o.formatsTxns, "formats-txns", 20_000, "pgbench transactions each value format catches up in the formats scenario")
	fs.IntVar(&o.formatsRounds, "formats-rounds", 2, "runs of each path per value format in the formats scenario, in the order json, json-with-schema, avro, avro, json-with-schema, json, ...")
	fs.StringVar(&o.out, "out", "bench-results.json", "where to write the results as JSON")
	fs.Int64Var(&o.lagRows, "lag-rows", 2_500_000, "rows of the big table added in the lag scenario (its copy should take at least 10s)")
	fs.StringVar(&o.lagStrategy, "lag-strategy", "chunked", "CDC_SNAPSHOT_STRATEGY of the lag scenario's copy: chunked or copy")
	fs.IntVar(&o.lagRate, "lag-rate", 100, "transactions per second on the small tables in the lag scenario")
	fs.IntVar(&o.scale, "scale", 1, "pgbench scale factor of the streaming scenario (100000 accounts each)")
	fs.IntVar(&o.clients, "clients", 4, "pgbench clients writing the backlog")
	fs.IntVar(&o.deliveryRounds, "delivery-rounds", 2, "catch-ups of the streaming backlog per delivery mode, in the order exactly-once, at-least-once, at-least-once, exactly-once, ... (whichever runs first is slower)")
	fs.IntVar(&o.snapshotRounds, "snapshot-rounds", 2, "measured copies of the snapshot table per snapshot strategy (CDC_SNAPSHOT_STRATEGY), in the order chunked, copy, copy, chunked, ..., after one unmeasured warm-up copy")
	fs.BoolVar(&o.instructions, "instructions", false, "count the instructions per record of the hot loops' benchmarks under valgrind --tool=callgrind instead of running the scenarios (no services; `make bench-instructions`)")
	fs.IntVar(&o.profileRounds, "profile-rounds", 3, "extra exactly-once catch-ups of the streaming backlog, and extra chunked copies of the snapshot table, each with a CPU profile, merged for the catch-up's and the snapshot's CPU split (0: none)")
	fs.StringVar(&o.abBin, "ab-bin", "", "stream scenario: also catch the backlog up exactly-once with this other cdc binary (B) and with the repository's (A), alternating A B B A ..., -ab-rounds times each, and print each run's CPU per change beside the walsender's of the same run (an A/B comparison on a shared machine)")
	fs.IntVar(&o.abRounds, "ab-rounds", 3, "catch-ups per binary with -ab-bin")
	fs.BoolVar(&o.pin, "pin", true, "stream scenario: one more exactly-once catch-up with cdc pinned to CPU 0 and PostgreSQL and the broker to CPU 1 (taskset), against a READ limit measured the same way (needs 2 CPUs and the bench's own servers)")
	fs.BoolVar(&o.cluster, "cluster", true, "stream scenario: also catch the backlog up exactly-once into a three-node Kafka cluster the bench starts from the installed Kafka jars (replication factor 3, min.insync.replicas 2), alternating with the single broker, -delivery-rounds runs each")
	fs.StringVar(&o.codec, "codec", "", "CDC_KAFKA_COMPRESSION of every cdc run but the compression scenario's, and the codec of the WRITE limits' producer (default: cdc's default, "+sink.DefaultCompression+")")
	fs.BoolVar(&o.keep, "keep", false, "keep the services' state folder and the work folder (logs)")
	fs.StringVar(&o.kafkaHeap, "kafka-heap", "", "JVM flags of the Kafka broker the bench starts (default $TIDEMARK_KAFKA_HEAP or "+defaultKafkaHeap+")")
	fs.StringVar(&o.cdcLogLevel, "cdc-log-level", "info", "CDC_LOG_LEVEL of the cdc processes")
	fs.StringVar(&o.selfProfile, "self-profile", "", "write a CPU profile of the bench process itself (its clients, watchers and writers, not cdc) to this file")
	fs.Var(&o.cdcEnv, "cdc-env", "NAME=value set in every cdc's environment, over the scenario's own (repeatable; e.g. -cdc-env CDC_MEMORY_LIMIT=400MiB)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	errs = append(errs, o.problems()...)
	return o, errors.Join(errs...)
}

// problems lists every flag value that is out of range.
func (o options) problems() []error {
	var errs []error
	switch o.only {
	case "", scenarioSnapshot, scenarioStream, scenarioLag, scenarioCompression, scenarioFormats, scenarioMemory, scenarioTables,
		scenarioMany, scenarioCopies, scenarioCopyCatchUp, scenarioDebezium:
	default:
		errs = append(errs, fmt.Errorf("-only %q: want snapshot, stream, lag, compression, formats, memory, tables, many, copies, copy-catchup or debezium", o.only))
	}
	if o.manyTables < 1 {
		errs = append(errs, fmt.Errorf("-many-tables %d: must be at least 1", o.manyTables))
	}
	if o.copies < 1 || o.copiesTables < o.copies+10 || o.copiesRows < 1 {
		errs = append(errs, fmt.Errorf("-copies %d, -copies-tables %d, -copies-rows %d: want at least 1 copy, room for it and 10 busy tables, and 1 row",
			o.copies, o.copiesTables, o.copiesRows))
	}
	if o.catchupCopyRows < 1 || o.catchupTxns < 1 {
		errs = append(errs, fmt.Errorf("-catchup-copy-rows %d, -catchup-txns %d: both must be at least 1", o.catchupCopyRows, o.catchupTxns))
	}
	if o.debeziumScale < 1 || o.debeziumTxns < 1 {
		errs = append(errs, fmt.Errorf("-debezium-scale %d, -debezium-txns %d: both must be at least 1", o.debeziumScale, o.debeziumTxns))
	}
	if o.compressionRows < 1 || o.compressionTxns < 1 {
		errs = append(errs, fmt.Errorf("-compression-rows %d, -compression-txns %d: both must be at least 1", o.compressionRows, o.compressionTxns))
	}
	for _, f := range strings.Split(o.debeziumFormats, ",") {
		if !slices.Contains(debeziumFormatNames, f) {
			errs = append(errs, fmt.Errorf("-debezium-formats %q: want a comma-separated list of %s", o.debeziumFormats, strings.Join(debeziumFormatNames, ", ")))
			break
		}
	}
	if o.formatsRows < 1 || o.formatsTxns < 1 || o.formatsRounds < 1 {
		errs = append(errs, fmt.Errorf("-formats-rows %d, -formats-txns %d, -formats-rounds %d: each must be at least 1", o.formatsRows, o.formatsTxns, o.formatsRounds))
	}
	if o.quietTables < 1 || o.tablesWindow < time.Second {
		errs = append(errs, fmt.Errorf("-quiet-tables %d, -tables-window %s: want at least 1 and 1s", o.quietTables, o.tablesWindow))
	}
	if o.memoryRows < 1 || o.memoryTxns < 1 {
		errs = append(errs, fmt.Errorf("-memory-rows %d, -memory-txns %d: both must be at least 1", o.memoryRows, o.memoryTxns))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"rows", o.rows}, {"txns", int64(o.txns)}, {"clients", int64(o.clients)}, {"delivery-rounds", int64(o.deliveryRounds)},
		{"snapshot-rounds", int64(o.snapshotRounds)}, {"ab-rounds", int64(o.abRounds)}, {"scale", int64(o.scale)}, {"lag-rows", o.lagRows},
	} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("-%s %d: must be at least 1", f.name, f.v))
		}
	}
	if o.profileRounds < 0 || o.profileRounds > 20 {
		errs = append(errs, fmt.Errorf("-profile-rounds %d: want 0 to 20", o.profileRounds))
	}
	if o.workers < 1 || o.workers > 64 {
		errs = append(errs, fmt.Errorf("-workers %d: want 1 to 64", o.workers))
	}
	if o.lagRate < 1 || o.lagRate > 5000 {
		errs = append(errs, fmt.Errorf("-lag-rate %d: want 1 to 5000", o.lagRate))
	}
	if o.lagStrategy != "chunked" && o.lagStrategy != "copy" {
		errs = append(errs, fmt.Errorf("-lag-strategy %q: want chunked or copy", o.lagStrategy))
	}
	if o.codec != "" && !slices.Contains(sink.Compressions, o.codec) {
		errs = append(errs, fmt.Errorf("-codec %q: want one of %s", o.codec, strings.Join(sink.Compressions, ", ")))
	}
	return errs
}

// benchCodec is the codec of cdc's runs and of the WRITE limits: -codec, or cdc's default.
func (o options) benchCodec() string {
	if o.codec == "" {
		return sink.DefaultCompression
	}
	return o.codec
}

// Scenario names, as -only takes them.
const (
	scenarioSnapshot = "snapshot"
	scenarioStream   = "stream"
	scenarioLag      = "lag"
	// scenarioCompression compares CDC_KAFKA_COMPRESSION codecs on both paths.
	scenarioCompression = "compression"
	// scenarioFormats compares CDC_VALUE_FORMAT values on both paths.
	scenarioFormats = "formats"
	// scenarioMemory prints cdc's peak RSS in a large copy and a large catch-up.
	scenarioMemory = "memory"
	// scenarioTables measures many quiet tables beside a few busy ones.
	scenarioTables = "tables"
	// scenarioMany hydrates a publication FOR ALL TABLES of thousands of small tables.
	scenarioMany = "many"
	// scenarioCopies copies several tables at once among many, beside streaming.
	scenarioCopies = "copies"
	// scenarioCopyCatchUp copies a large table beside the catch-up of a backlog.
	scenarioCopyCatchUp = "copy-catchup"
	// scenarioDebezium runs Tidemark and Debezium on the same data; only with -only (it
	// downloads Debezium).
	scenarioDebezium = "debezium"
)

func (o options) wants(s string) bool {
	return o.only == s || o.only == "" && s != scenarioDebezium
}
