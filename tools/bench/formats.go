package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
)

// The formats scenario (-only formats) copies one generated table and catches up one pgbench
// backlog with each CDC_VALUE_FORMAT, cdc otherwise at its defaults (exactly-once, lz4), each
// run with its own slot and topics (and so its own registry subjects), in the order A B C C B A
// ... over -formats-rounds rounds (the first run after a start is slower: each format gets the
// same places), after one unmeasured json copy that warms the broker. avro runs against a
// schema registry: CDC_TEST_SCHEMA_REGISTRY_URL when set, otherwise an Apicurio Registry the
// scenario starts with scripts/services.sh registry-up (fetched from Maven Central like Kafka;
// it needs a Java of 21 or later) and stops at its end.
//
// Per path and format: the rate (rows or changes over the time from the copy's start, or cdc's
// start for the catch-up, to the watermark that says the topics hold everything), cdc's CPU
// seconds (user + sys of the exited process, getrusage) per record, the bytes the run added to
// the topics' log segments on the broker (compressed, with batch headers and transaction
// markers) per record, and the records' key + value bytes read back per record (uncompressed).
// Rates and CPU per record are also given as ratios to json's in the same run.

// valueFormats are the CDC_VALUE_FORMAT values the formats scenario compares; the first is the
// reference of its ratios.
var valueFormats = []string{"json", "json-with-schema", "avro"}

// formatPath is one format's figures on one path, summed over its rounds.
type formatPath struct {
	Records       int64   `json:"records"`
	Seconds       float64 `json:"seconds"`
	PerSecond     float64 `json:"per_second"`
	CPUSeconds    float64 `json:"cdc_cpu_seconds"`
	BrokerBytes   int64   `json:"broker_bytes"`
	KeyValueBytes int64   `json:"key_value_bytes"`
	// Ratios to json's figure on the same path in the same run.
	RateRatio float64 `json:"rate_ratio_to_json"`
	CPURatio  float64 `json:"cpu_per_record_ratio_to_json"`
}

// add sums one run into p.
func (p *formatPath) add(records int64, seconds, cpu float64, brokerBytes, kvBytes int64) {
	p.Records += records
	p.Seconds += seconds
	p.CPUSeconds += cpu
	p.BrokerBytes += brokerBytes
	p.KeyValueBytes += kvBytes
	if p.Seconds > 0 {
		p.PerSecond = float64(p.Records) / p.Seconds
	}
}

// perRecord is x per record of the path (0 without records).
func (p formatPath) perRecord(x float64) float64 {
	if p.Records == 0 {
		return 0
	}
	return x / float64(p.Records)
}

// formatResult is one value format's figures on both paths.
type formatResult struct {
	Format   string     `json:"format"`
	Snapshot formatPath `json:"snapshot"`
	CatchUp  formatPath `json:"catch_up"`
}

// formatsResult is the formats scenario's outcome.
type formatsResult struct {
	Rows        int64          `json:"snapshot_rows"`
	BacklogTxns int64          `json:"backlog_transactions"`
	Changes     int64          `json:"backlog_changes"`
	Rounds      int            `json:"rounds"`
	Registry    string         `json:"registry"`
	Formats     []formatResult `json:"formats"`
}

// formatOrder is the order of the measured runs: A B C, C B A, A B C, ... for rounds rounds,
// each entry an index into valueFormats.
func formatOrder(rounds int) []int {
	var order []int
	for r := range rounds {
		for i := range valueFormats {
			if r%2 == 1 {
				i = len(valueFormats) - 1 - i
			}
			order = append(order, i)
		}
	}
	return order
}

// schemaRegistry returns the URL of the registry avro runs against and a function that stops
// it when the bench started it.
func (b *bench) schemaRegistry(ctx context.Context) (string, string, func(), error) {
	if u := b.getenv(testsvc.EnvRegistryURL); u != "" {
		return u, testsvc.EnvRegistryURL, func() {}, nil
	}
	b.logf("formats: starting Apicurio Registry (scripts/services.sh registry-up)")
	start := time.Now()
	r, err := testsvc.StartRegistry(ctx, testsvc.RegistryOptions{State: filepath.Join(b.work, "registry")})
	if err != nil {
		return "", "", nil, fmt.Errorf("start schema registry: %w", err)
	}
	b.logf("formats: registry ready in %s at %s", time.Since(start).Round(100*time.Millisecond), r.URL())
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.Stop(sctx, b.o.keep); err != nil {
			b.logf("formats: stop registry: %v", err)
		}
	}
	return r.URL(), "scripts/services.sh registry-up (Apicurio Registry, in memory)", stop, nil
}

// formatVars is cdc's environment for format.
func formatVars(format, registry string) map[string]string {
	v := map[string]string{"CDC_VALUE_FORMAT": format}
	if format == "avro" {
		v["CDC_SCHEMA_REGISTRY_URL"] = registry
	}
	return v
}

func (b *bench) formats(ctx context.Context) (*formatsResult, error) {
	registry, source, stop, err := b.schemaRegistry(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	s, err := b.newScenario(ctx, scenarioFormats)
	if err != nil {
		return nil, err
	}
	defer s.cleanup()
	res := &formatsResult{Rows: b.o.formatsRows, Rounds: b.o.formatsRounds, Registry: source}
	for _, f := range valueFormats {
		res.Formats = append(res.Formats, formatResult{Format: f})
	}
	if err := s.formatsSnapshot(ctx, res, registry); err != nil {
		return res, err
	}
	if err := s.formatsCatchUp(ctx, res, registry); err != nil {
		return res, err
	}
	res.setRatios()
	return res, nil
}

// formatsSnapshot copies one table with each format, -formats-rounds times each.
func (s *scenario) formatsSnapshot(ctx context.Context, res *formatsResult, registry string) error {
	b := s.b
	const table = "public.bench_formats"
	e := exportID(table)
	if err := s.createBigTable(ctx, table, res.Rows); err != nil {
		return err
	}
	b.logf("formats: warm-up copy (json, not measured)")
	if _, _, _, err := s.copyTable(ctx, e, res.Rows, strategyChunked, "fwarm", nil, nil); err != nil {
		b.logf("formats: warm-up run: %v", err)
	}
	for n, i := range formatOrder(res.Rounds) {
		f := &res.Formats[i]
		run, stats, topic, err := s.copyTable(ctx, e, res.Rows, strategyChunked, fmt.Sprintf("s%d", n), formatVars(f.Format, registry), nil)
		if err != nil {
			return fmt.Errorf("copy with %s: %w", f.Format, err)
		}
		onBroker, err := b.k.logDirBytes(ctx, topic)
		if err != nil {
			return err
		}
		f.Snapshot.add(stats.Records, run.CDC.Seconds, run.CPUSeconds, onBroker, stats.bytes())
		b.logf("formats: %s snapshot %.0f rows/s, cdc %.2f µs CPU per row, %.1f broker bytes per row",
			f.Format, run.CDC.PerSecond, 1e6*run.CPUSeconds/float64(max(1, stats.Records)), float64(onBroker)/float64(max(1, stats.Records)))
	}
	return nil
}

// formatsCatchUp hydrates the pgbench tables once per format and round, writes one backlog
// while every cdc is stopped, then catches it up with each in formatOrder.
func (s *scenario) formatsCatchUp(ctx context.Context, res *formatsResult, registry string) error {
	b := s.b
	pgbench, conn, exports, err := s.pgbenchInit(ctx, 1)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	order := formatOrder(res.Rounds)
	lanes := make([]*lane, len(order))
	before := make([]int64, len(order))
	for n, i := range order {
		l := s.newLane(deliveryExactlyOnce, fmt.Sprintf("c%d", n), exports)
		for k, v := range formatVars(valueFormats[i], registry) {
			l.vars[k] = v
		}
		lanes[n] = l
		defer l.close()
		if err := l.hydrate(ctx, conn); err != nil {
			return fmt.Errorf("hydrate with %s: %w", valueFormats[i], err)
		}
		if before[n], err = b.k.logDirBytes(ctx, l.topics...); err != nil {
			return err
		}
	}
	if res.BacklogTxns, err = s.pgbenchBacklog(ctx, pgbench, b.o.formatsTxns); err != nil {
		return err
	}
	res.Changes = 4 * res.BacklogTxns // tpcb-like: 3 updates and 1 insert
	target, err := currentLSN(ctx, conn)
	if err != nil {
		return err
	}
	for n, l := range lanes {
		if err := s.formatCatchUp(ctx, l, &res.Formats[order[n]], target, res.Changes, before[n]); err != nil {
			return err
		}
	}
	return nil
}

// formatCatchUp catches lane l up to target and adds the run to f.
func (s *scenario) formatCatchUp(ctx context.Context, l *lane, f *formatResult, target change.LSN, changes, before int64) error {
	run, stats, err := l.catchUp(ctx, target, changes)
	if err != nil {
		return fmt.Errorf("catch-up with %s: %w", f.Format, err)
	}
	after, err := s.b.k.logDirBytes(ctx, l.topics...)
	if err != nil {
		return err
	}
	f.CatchUp.add(stats.Records, run.CDC.Seconds, run.CPUSeconds, after-before, stats.bytes())
	s.b.logf("formats: %s catch-up %.0f changes/s, cdc %.2f µs CPU per change, %.1f broker bytes per change",
		f.Format, run.CDC.PerSecond, 1e6*run.CPUSeconds/float64(max(1, stats.Records)), float64(after-before)/float64(max(1, stats.Records)))
	return nil
}

// setRatios sets each format's ratios to json's (the first format).
func (r *formatsResult) setRatios() {
	if len(r.Formats) == 0 {
		return
	}
	base := r.Formats[0]
	for i := range r.Formats {
		for _, p := range []struct{ f, base *formatPath }{
			{&r.Formats[i].Snapshot, &base.Snapshot}, {&r.Formats[i].CatchUp, &base.CatchUp},
		} {
			p.f.RateRatio = over(p.f.PerSecond, p.base.PerSecond)
			p.f.CPURatio = over(p.f.perRecord(p.f.CPUSeconds), p.base.perRecord(p.base.CPUSeconds))
		}
	}
}

// avroCPUTarget is the target: avro's cdc CPU per record at most this much of json's.
const avroCPUTarget = 0.6

// printFormats prints the formats table.
func printFormats(w io.Writer, r *formatsResult) {
	if r == nil || len(r.Formats) == 0 {
		return
	}
	fmt.Fprintf(w, "\nValue formats (CDC_VALUE_FORMAT; exactly-once; %d round(s); ratios against json in this run)\n", r.Rounds)
	fmt.Fprintf(w, "  snapshot: %s rows copied per run; catch-up: %s pgbench transactions = %s changes per run; registry: %s\n",
		thousands(r.Rows), thousands(r.BacklogTxns), thousands(r.Changes), r.Registry)
	fmt.Fprintf(w, "  %-9s %-17s %12s %6s %14s %6s %13s %16s\n",
		"path", "format", "records/s", "ratio", "cdc CPU µs/rec", "ratio", "broker B/rec", "key+value B/rec")
	for _, path := range []string{"snapshot", "catch-up"} {
		for _, f := range r.Formats {
			p := f.Snapshot
			if path == "catch-up" {
				p = f.CatchUp
			}
			fmt.Fprintf(w, "  %-9s %-17s %12s %6.2f %14.2f %6.2f %13.1f %16.1f\n",
				path, f.Format, thousands(int64(p.PerSecond)), p.RateRatio, 1e6*p.perRecord(p.CPUSeconds), p.CPURatio,
				p.perRecord(float64(p.BrokerBytes)), p.perRecord(float64(p.KeyValueBytes)))
		}
	}
	for _, f := range r.Formats {
		if f.Format == "avro" {
			fmt.Fprintf(w, "  avro / json cdc CPU per record: snapshot %.2f, catch-up %.2f (target <= %.1f)\n",
				f.Snapshot.CPURatio, f.CatchUp.CPURatio, avroCPUTarget)
		}
	}
}
