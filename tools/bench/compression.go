package main

import (
	"context"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tidemark/cdc/pkg/sink"
)

// compressionCodecs are the CDC_KAFKA_COMPRESSION values the compression scenario compares.
var compressionCodecs = sink.Compressions

// compressionResult is one codec's figures: both paths' throughput, the bytes they left on the
// broker (log segment sizes) and cdc's CPU time.
type compressionResult struct {
	Codec               string     `json:"codec"`
	Snapshot            throughput `json:"snapshot"`
	SnapshotBrokerBytes int64      `json:"snapshot_broker_bytes"`
	SnapshotCPUSeconds  float64    `json:"snapshot_cpu_seconds"`
	CatchUp             throughput `json:"catch_up"`
	CatchUpBrokerBytes  int64      `json:"catch_up_broker_bytes"`
	CatchUpCPUSeconds   float64    `json:"catch_up_cpu_seconds"`
}

// logDirBytes sums the log segment sizes of topics on every broker.
func (k *kafkaClient) logDirBytes(ctx context.Context, topics ...string) (int64, error) {
	dirs, err := k.adm.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("describe log dirs: %w", err)
	}
	want := make(map[string]bool, len(topics))
	for _, t := range topics {
		want[t] = true
	}
	var n int64
	dirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if want[p.Topic] {
				n += p.Size
			}
		})
	})
	return n, nil
}

// compression copies one table and catches up one pgbench backlog with each codec, one after the
// other on the same data, each run with its own slot and topics.
func (b *bench) compression(ctx context.Context) ([]compressionResult, error) {
	s, err := b.newScenario(ctx, scenarioCompression)
	if err != nil {
		return nil, err
	}
	defer s.cleanup()
	const table = "public.bench_compress"
	e := exportID(table)
	if err := s.createBigTable(ctx, table, b.o.compressionRows); err != nil {
		return nil, err
	}
	res := make([]compressionResult, len(compressionCodecs))
	b.logf("compression: warm-up copy (not measured)")
	if _, _, _, err := s.copyTable(ctx, e, b.o.compressionRows, strategyChunked, "cwarm", nil, nil); err != nil {
		b.logf("compression: warm-up run: %v", err)
	}
	for i, codec := range compressionCodecs {
		res[i].Codec = codec
		run, _, topic, err := s.copyTable(ctx, e, b.o.compressionRows, strategyChunked, "c"+codec, map[string]string{"CDC_KAFKA_COMPRESSION": codec}, nil)
		if err != nil {
			return res, fmt.Errorf("copy with %s: %w", codec, err)
		}
		res[i].Snapshot, res[i].SnapshotCPUSeconds = run.CDC, run.CPUSeconds
		if res[i].SnapshotBrokerBytes, err = b.k.logDirBytes(ctx, topic); err != nil {
			return res, err
		}
		b.logf("compression: %s snapshot %.0f rows/s, %s on the broker", codec, run.CDC.PerSecond, mib(res[i].SnapshotBrokerBytes))
	}

	// Catch-up: pgbench tables hydrated by one lane per codec, then one backlog for all.
	pgbench, conn, exports, err := s.pgbenchInit(ctx, 1)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.Background())
	lanes := make([]*lane, len(compressionCodecs))
	before := make([]int64, len(compressionCodecs))
	for i, codec := range compressionCodecs {
		l := s.newLane(deliveryExactlyOnce, "z"+codec, exports)
		l.vars["CDC_KAFKA_COMPRESSION"] = codec
		lanes[i] = l
		defer l.close()
		if err := l.hydrate(ctx, conn); err != nil {
			return res, fmt.Errorf("hydrate with %s: %w", codec, err)
		}
		if before[i], err = b.k.logDirBytes(ctx, l.topics...); err != nil {
			return res, err
		}
	}
	txns, err := s.pgbenchBacklog(ctx, pgbench, b.o.compressionTxns)
	if err != nil {
		return res, err
	}
	target, err := currentLSN(ctx, conn)
	if err != nil {
		return res, err
	}
	changes := txns * 4 // tpcb-like: 3 updates and 1 insert
	for i, l := range lanes {
		run, _, err := l.catchUp(ctx, target, changes)
		if err != nil {
			return res, fmt.Errorf("catch-up with %s: %w", compressionCodecs[i], err)
		}
		res[i].CatchUp, res[i].CatchUpCPUSeconds = run.CDC, run.CPUSeconds
		after, err := b.k.logDirBytes(ctx, l.topics...)
		if err != nil {
			return res, err
		}
		res[i].CatchUpBrokerBytes = after - before[i]
		b.logf("compression: %s catch-up %.0f changes/s, %s on the broker", compressionCodecs[i], run.CDC.PerSecond, mib(res[i].CatchUpBrokerBytes))
	}
	return res, nil
}

// printCompression prints the compression table; ratios are against the codec "none".
func printCompression(w io.Writer, rs []compressionResult) {
	if len(rs) == 0 {
		return
	}
	base := rs[0]
	fmt.Fprintf(w, "\nCompression (CDC_KAFKA_COMPRESSION; exactly-once; ratios against none)\n")
	fmt.Fprintf(w, "  %-7s %14s %6s %11s %6s %7s   %15s %6s %11s %6s %7s\n",
		"codec", "snapshot rows/s", "ratio", "broker", "bytes", "cpu s", "catch-up ch/s", "ratio", "broker", "bytes", "cpu s")
	for _, r := range rs {
		fmt.Fprintf(w, "  %-7s %14.0f %6.2f %11s %6.2f %7.1f   %15.0f %6.2f %11s %6.2f %7.1f\n",
			r.Codec, r.Snapshot.PerSecond, over(r.Snapshot.PerSecond, base.Snapshot.PerSecond),
			mib(r.SnapshotBrokerBytes), over(float64(r.SnapshotBrokerBytes), float64(base.SnapshotBrokerBytes)), r.SnapshotCPUSeconds,
			r.CatchUp.PerSecond, over(r.CatchUp.PerSecond, base.CatchUp.PerSecond),
			mib(r.CatchUpBrokerBytes), over(float64(r.CatchUpBrokerBytes), float64(base.CatchUpBrokerBytes)), r.CatchUpCPUSeconds)
	}
}
