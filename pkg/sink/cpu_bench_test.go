package sink

import (
	"bytes"
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// BenchmarkProduceCPU produces 353-byte records (key, value and headers) through Run to a real
// broker (internal/testenv), exactly-once with the sink's defaults but for the codec, 10 records
// per unit, and reports the CPU (user + system, and system alone, of the whole process: the
// sink, franz-go and the collector) and the minor page faults per million records. CPU time moves less with the machine's load than wall
// time; compare builds by alternating them (docs/performance.md, "Producer CPU"):
//
//	go test -c -o sink.test ./pkg/sink/
//	./sink.test -test.run '^$' -test.bench ProduceCPU -test.benchtime 100000x -test.count 1
func BenchmarkProduceCPU(b *testing.B) {
	for _, codec := range []string{"none", "lz4"} {
		b.Run(codec, func(b *testing.B) { benchProduceCPU(b, codec) })
	}
}

// cpuBenchRecordBytes is the size of each record of BenchmarkProduceCPU: key, value and header bytes.
const cpuBenchRecordBytes = 353

func benchProduceCPU(b *testing.B, codec string) {
	env := newRealEnv(b)
	cfg := env.config(b, ExactlyOnce)
	cfg.Linger, cfg.Tick, cfg.Compression = 0, 0, codec // the defaults, but for the codec
	s := env.newSink(b, cfg)
	topic := env.topic("cpu")
	if err := s.EnsureTopics(b.Context(), []TopicSpec{{Name: topic, Compact: true}}); err != nil {
		b.Fatalf("EnsureTopics: %v", err)
	}
	units := cpuBenchUnits(topic, 64, 10)
	in := make(chan *change.Unit, 64)
	p := newFakeProgress(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, in, p.serve(ctx)) }()

	ru0, records, start := rusage(b), 0, time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		u := units[i%len(units)]
		in <- u
		records += len(u.Records)
	}
	close(in)
	if err := <-done; err != nil {
		b.Fatalf("Run: %v", err)
	}
	b.StopTimer()
	ru, elapsed := rusage(b), time.Since(start)
	perM := 1e6 / float64(records)
	user := time.Duration(ru.Utime.Nano() - ru0.Utime.Nano())
	sys := time.Duration(ru.Stime.Nano() - ru0.Stime.Nano())
	b.ReportMetric((user+sys).Seconds()*perM, "cpu-s/Mrec")
	b.ReportMetric(sys.Seconds()*perM, "sys-s/Mrec")
	// Minor page faults (fresh memory touched) do not move with the machine's load.
	b.ReportMetric(float64(ru.Minflt-ru0.Minflt)*perM, "minflt/Mrec")
	// From the first record to Run's return: the last batch's flush and commit included.
	b.ReportMetric(float64(records)/elapsed.Seconds(), "records/s")
}

// cpuBenchUnits returns n units of perUnit records of cpuBenchRecordBytes each, with distinct
// keys (spread over the partitions).
func cpuBenchUnits(topic string, n, perUnit int) []*change.Unit {
	units := make([]*change.Unit, n)
	for i := range units {
		u := &change.Unit{Kind: change.KindTxn, Commit: change.LSN(i + 1), End: change.LSN(i + 2)}
		for j := range perUnit {
			r := change.Record{
				Topic: topic, Partition: change.AnyPartition,
				Key:     fmt.Appendf(nil, `{"aid":%d}`, i*perUnit+j),
				Headers: []change.Header{{Key: "lsn", Value: []byte("0/16B3748")}, {Key: "op", Value: []byte("u")}},
			}
			used := len(r.Key)
			for _, h := range r.Headers {
				used += len(h.Key) + len(h.Value)
			}
			r.Value = cpuBenchValue(i*perUnit+j, cpuBenchRecordBytes-used)
			u.Records = append(u.Records, r)
		}
		units[i] = u
	}
	return units
}

// cpuBenchValue returns a pgbench_accounts update as a Debezium envelope (its filler column is
// 84 spaces, as pgbench writes it), cut or padded to n bytes.
func cpuBenchValue(id, n int) []byte {
	v := fmt.Appendf(nil, `{"before":null,"after":{"aid":%d,"bid":%d,"abalance":%d,"filler":"%s"},`+
		`"source":{"version":"tidemark","connector":"postgresql","name":"tidemark","db":"bench",`+
		`"schema":"public","table":"pgbench_accounts","lsn":%d,"txId":%d},"op":"u","ts_ms":%d}`,
		id, id/100000+1, id*7%9973-4986, bytes.Repeat([]byte(" "), 84), 23000000+id*160, 750+id/10, 1765000000000+id)
	for len(v) < n {
		v = append(v, ' ')
	}
	return v[:n]
}

// rusage returns the process's resource usage so far.
func rusage(b *testing.B) syscall.Rusage {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return ru
}
