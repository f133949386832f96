// Command bench measures Tidemark end to end against real PostgreSQL and Kafka and prints the
// figures beside the limits of the hardware it runs on (`make bench`).
//
// Three scenarios, each with its own database, topic prefix and slot:
//
//   - snapshot: one generated table copied by cdc, beside the READ limit (the same parallel COPY
//     by ctid range, rows discarded) and the WRITE limit (the same records, pre-encoded, produced
//     with the sink's producer settings and transaction sizes). The same table is copied with
//     each snapshot strategy (CDC_SNAPSHOT_STRATEGY in cdc's environment, everything else the
//     same): chunked (the default: key-range chunks in short transactions) and copy (one
//     exported snapshot, parallel COPY by ctid range), -snapshot-rounds times each (default 2),
//     each run with its own slot and topics, in the order A B B A A B ... (A chunked) so that a
//     drift favours neither, after one unmeasured chunked run that warms the broker (the first
//     run after its start is slower, whatever its strategy). The report gives each strategy's
//     total rows over total time beside the limits, and the ratio chunked / copy (target >=
//     0.8). The JSON file keeps the chunked figures at the top level of "snapshot" (with
//     "strategy") and the copy figures under "snapshot.copy". The WRITE limit replays the
//     records of the first measured chunked run.
//   - stream: a pgbench backlog written while cdc is stopped, then caught up by a restarted cdc,
//     beside the READ limit (the raw pgoutput stream of the backlog from a second slot) and the
//     WRITE limit. The same backlog is caught up -delivery-rounds times (default 2) by an
//     exactly-once cdc and as often by an at-least-once cdc, each run with its own slot and
//     topics hydrated before the backlog, in the order A B B A A B ... (the first catch-up of a
//     run is slower, so each mode gets the same places); the report gives each mode's total
//     changes over total time and the ratio exactly-once / at-least-once. With -pin (the
//     default) one more exactly-once catch-up runs with cdc pinned to CPU 0 and PostgreSQL and
//     the broker to CPU 1 (taskset), against the Go reader's READ limit measured pinned the
//     same way from a slot of its own (pinned.go). With -cluster (the default) the bench also
//     starts a three-node KRaft cluster (replication factor 3, min.insync.replicas 2) and the
//     backlog is caught up exactly-once into it and into the single broker, alternating
//     (single, cluster, cluster, single, ...), with cdc at its defaults (cluster.go).
//   - lag: the watermark lag of two busy small tables while a big table added to the
//     publication is copied, in independent and in global watermark mode, with the copy
//     strategy of -lag-strategy (chunked by default; copy to compare).
//   - compression: one table copied and one pgbench backlog caught up with each
//     CDC_KAFKA_COMPRESSION codec, with the bytes each left on the broker (log segment sizes).
//     Every other cdc run uses cdc's defaults, lz4 included (-codec picks another), and the
//     WRITE limits' producer and Debezium's matched producer use the same codec.
//   - formats (formats.go): one table copied and one pgbench backlog caught up with each
//     CDC_VALUE_FORMAT (json, json-with-schema, avro against CDC_TEST_SCHEMA_REGISTRY_URL or an
//     Apicurio Registry it starts), -formats-rounds times each: rows/s, changes/s and cdc CPU
//     per record as ratios to json in the same run, and bytes per record on the broker (log
//     segment sizes) and read back (key + value).
//   - memory: cdc's peak RSS during a -memory-rows copy while two small tables stream (the lag
//     scenario's run) and during the catch-up of a -memory-txns backlog (target 256 MiB).
//   - tables: -quiet-tables quiet tables beside 10 busy ones: time to hydrate, topics created,
//     watermark records per second by kind at steady state, and a quiet table's watermark lag
//     as pkg/wait reads it.
//   - copies (scale.go): -copies-tables tables in one publication, 10 busy (-lag-rate
//     transactions a second) and the rest quiet, then -copies tables of -copies-rows rows added
//     in one statement and copied at once beside the streaming; and copy-catchup: a
//     -catchup-copy-rows table added while cdc is stopped with a -catchup-txns pgbench backlog,
//     copied beside the catch-up and a steady writer. Both report, per phase, records/s by kind
//     (snapshot rows from tidemark_snapshot_rows_total, stream changes and watermark records
//     from their topics), the hydrated tables' watermark lag in seconds (p50, p99, max), cdc's
//     RSS (sampled and VmHWM) and Go heap (/metrics), and keep cdc's heap profiles (after
//     hydration, after the copies, and at the heap's peak) in the work folder.
//   - debezium (only with -only debezium, `make bench-debezium`): Tidemark against Debezium's
//     PostgreSQL connector in a Kafka Connect standalone worker, on the same pgbench data
//     (-debezium-scale, -debezium-txns): snapshot rows/s and catch-up changes/s from process
//     start, CPU seconds and peak RSS, Debezium with Connect's default producer and with
//     producer settings matched to Tidemark's (see debezium.go); once per -debezium-formats
//     format: json (Debezium's JsonConverter) and avro (Tidemark's avro, Debezium with Apicurio
//     Registry's AvroConverter, one registry; debezium_formats.go).
//
// The snapshot and stream scenarios also measure a WRITE ceiling: the same records produced by
// 1 and 2 producers with the sink's settings and with 1 MB batches (no transactions); the best
// run is the ceiling, and cdc's ratio is given against min(read, ceiling) too. The stream's READ
// limit is measured twice: with the Go reader and with pg_recvlogical to /dev/null. Every cdc
// run reports its CPU time and peak RSS, and the report prints the broker's settings.
//
// Against the servers' own cost (limit.go): the snapshot and catch-up runs read, from /proc,
// the CPU time PostgreSQL (the postmaster and its children), the walsender serving cdc's slot and
// the broker used while cdc ran, and print the servers-only ceiling: cores ÷ the servers' CPU
// per record (PostgreSQL + broker for the snapshot, walsender + broker for the catch-up), the
// rate these servers would reach here if cdc cost nothing, with cdc's rate as a ratio of it,
// and cdc's CPU per record as a ratio of the servers' (snapshot) and of the walsender's
// (catch-up). The debezium scenario prints the same for Tidemark's runs, and Tidemark's CPU per
// record over each Debezium profile's. The snapshot scenario also reports rows read ÷ table rows
// (pg_stat_user_tables: seq_tup_read + idx_tup_fetch, before and after each copy) for both
// strategies, on the vacuumed bench table and on a freshly loaded one (not vacuumed, autovacuum
// off for it: the visibility map unset, as after a bulk load), copied once more per strategy.
//
// The catch-up's CPU split (profile.go): one more exactly-once cdc catches up the same backlog,
// not counted in the figures, with pprof on (CDC_HTTP_PPROF behind a random CDC_HTTP_TOKEN); a
// CPU profile of its catch-up is bucketed by the functions on each sample's stack into read,
// hand-off, decode, encode, produce, GC and other, and each share is scaled by the measured
// runs' cdc CPU seconds per 1,000,000 changes. -profile-rounds (default 3) such catch-ups are
// profiled and their profiles merged; the profiles stay in the work folder.
//
// -ab-bin compares another cdc binary with the repository's in the stream scenario: -ab-rounds
// exactly-once catch-ups of the same backlog each, alternating A B B A, each logged with its
// cdc and walsender CPU per 1,000,000 changes, then the medians per binary.
//
// -instructions (`make bench-instructions`, instructions.go) runs no scenario: it counts the
// instructions per record of BenchmarkDecodeTxn (with its pkg/codec part) and of the codec's
// snapshot row benchmarks under valgrind --tool=callgrind, from two fixed iteration counts.
//
// Services come from CDC_TEST_PG_URL and CDC_TEST_KAFKA_BROKERS when both are set; otherwise
// scripts/services.sh starts a private PostgreSQL and Kafka on free ports and removes them at the
// end. cdc is built with `go build` and run as a subprocess configured by environment variables,
// as a user would run it. Nothing is asserted: this is a measurement tool. The figures are printed
// as tables and written to a JSON file.
//
// Usage:
//
//	make bench                                  # all scenarios, default sizes
//	make bench BENCH_FLAGS='-only lag'          # one scenario
//	go run ./tools/bench -rows 100000 -txns 10000 # smaller, for development
//
// Flags: -rows (snapshot table rows, default 1000000), -txns (pgbench backlog transactions,
// default 100000), -workers (snapshot workers, default 4), -snapshot-rounds (copies of the
// snapshot table per strategy, default 2), -only snapshot|stream|lag|compression|formats|memory|tables|copies|copy-catchup|debezium,
// -instructions, -out (results JSON,
// default bench-results.json), and a few more (see -h). cdc's logs (text format)
// stay in the work folder the bench prints.
package main
