package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

func TestServersLimit(t *testing.T) {
	// 1,000,000 changes at 100,000/s; cdc 6 s, walsender 4 s, broker 4 s of CPU on 2 cores.
	c := catchUp{CDC: throughput{Count: 1_000_000, PerSecond: 100_000}, CPUSeconds: 6, WalsenderCPUSeconds: 4, BrokerCPUSeconds: 4}
	l := catchUpLimit(c, 2)
	if l == nil {
		t.Fatal("no limit")
	}
	if l.Ceiling != 250_000 || l.Ratio != 0.4 || l.CDCOverVersus != 1.5 || l.ServersCPUPerMillion != 8 || l.CDCCPUPerMillion != 6 {
		t.Errorf("limit = %+v; want ceiling 250,000, ratio 0.4, cdc/walsender 1.5, servers 8 s, cdc 6 s", *l)
	}
	var b bytes.Buffer
	l.print(&b, "cdc exactly-once", "changes", 0.5)
	for _, want := range []string{"2 cores ÷ (walsender + broker 8.00s CPU per 1,000,000 changes) = 250,000 changes/s", "cdc at 0.40 of it", "1.50 × the walsender's"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printed %q, want it to contain %q", b.String(), want)
		}
	}
	if catchUpLimit(catchUp{CDC: throughput{Count: 10}, CPUSeconds: 1, BrokerCPUSeconds: 1}, 2) != nil {
		t.Error("a limit without the walsender's CPU")
	}
	if snapshotLimit(snapshotRun{CDC: throughput{Count: 10}, CPUSeconds: 1}, 2) != nil {
		t.Error("a limit without the servers' CPU")
	}
	s := snapshotLimit(snapshotRun{CDC: throughput{Count: 2_000_000, PerSecond: 200_000}, CPUSeconds: 2, PostgresCPUSeconds: 2, BrokerCPUSeconds: 6}, 2)
	if s == nil || s.Ceiling != 500_000 || s.CDCOverVersus != 0.25 || s.Ratio != 0.4 {
		t.Errorf("snapshot limit = %+v; want ceiling 500,000, cdc/servers 0.25, ratio 0.4", s)
	}
	(*serversLimit)(nil).print(&b, "x", "rows", 1) // prints nothing, does not panic
}

func TestParseProcStat(t *testing.T) {
	// pid (comm with spaces) state ppid ... utime stime cutime cstime at fields 14..17.
	line := "4242 (postgres: walsender (x)) S 17 4242 4242 0 -1 4194560 1 0 0 0 250 50 7 3 20 0 1 0 100 0 0\n"
	st, ok := parseProcStat([]byte(line))
	if !ok || st.ppid != 17 || st.self != 3 || st.children != 0.1 {
		t.Errorf("parseProcStat = %+v, %v; want ppid 17, self 3 s, children 0.1 s", st, ok)
	}
	if _, ok := parseProcStat([]byte("4242 (x) S 1 2")); ok {
		t.Error("a short line parsed")
	}
}

func TestSplitProfile(t *testing.T) {
	fn := func(names ...string) []*profile.Location {
		var locs []*profile.Location
		for _, n := range names {
			locs = append(locs, &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: n}}}})
		}
		return locs
	}
	sample := func(cpu int64, names ...string) *profile.Sample {
		return &profile.Sample{Value: []int64{cpu / 10_000_000, cpu}, Location: fn(names...)}
	}
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		DurationNanos: 2e9,
		Sample: []*profile.Sample{
			// read: a syscall under pgconn.
			sample(10e6, "syscall.Syscall", "internal/poll.(*FD).Read", "github.com/jackc/pgx/v5/pgconn.(*PgConn).ReceiveMessage", "github.com/tidemark/cdc/pkg/replication.(*Stage).receive"),
			// encode: an allocation under the codec, itself under the decoder.
			sample(30e6, "runtime.mallocgc", "github.com/tidemark/cdc/pkg/codec.(*Encoder).Insert", "github.com/tidemark/cdc/pkg/replication.(*streamState).change"),
			// GC assist inside that allocation: GC, not encode.
			sample(10e6, "runtime.gcAssistAlloc", "runtime.mallocgc", "github.com/tidemark/cdc/pkg/codec.(*Encoder).Insert"),
			// hand-off: the decoder waking the sink.
			sample(10e6, "runtime.futex", "runtime.notewakeup", "runtime.ready", "runtime.chansend", "github.com/tidemark/cdc/pkg/replication.(*streamState).emit"),
			sample(10e6, "github.com/tidemark/cdc/pkg/replication.readTuple"),
			// decode in a snapshot: a COPY row parsed by the snapshot stage.
			sample(10e6, "bytes.IndexByte", "github.com/tidemark/cdc/pkg/snapshot.(*chunkWriter).row"),
			sample(10e6, "hash/crc32.Update", "github.com/twmb/franz-go/pkg/kgo.(*recBatch).appendTo"),
			sample(10e6, "log/slog.(*Logger).Info", "github.com/tidemark/cdc/pkg/pipeline.run"),
		},
	}
	sp, err := splitProfile(p, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{partRead: 1, partEncode: 3, partGC: 1, partHandOff: 1, partDecode: 2, partProduce: 1, partOther: 1}
	for _, part := range sp.Parts {
		if math.Abs(part.PerMillion-want[part.Name]) > 1e-9 {
			t.Errorf("%s = %.3f s, want %.3f", part.Name, part.PerMillion, want[part.Name])
		}
	}
	if sp.Samples != 10 || sp.ProfileCPUSeconds != 0.1 || sp.ProfileSeconds != 2 {
		t.Errorf("split = %+v; want 10 samples, 0.1 s of CPU in 2 s", sp)
	}
	if _, err := splitProfile(&profile.Profile{SampleType: []*profile.ValueType{{Type: "alloc_space"}}}, 1); err == nil {
		t.Error("a heap profile was split")
	}
}

func TestPrintRowsRead(t *testing.T) {
	s := &snapshotResult{RowsReadFresh: map[string]*rowsRead{strategyChunked: {Strategy: strategyChunked, TableRows: 100, Read: 191, Ratio: 1.91}}}
	var b bytes.Buffer
	s.printRowsRead(&b, []snapshotRun{{Strategy: strategyChunked, RowsReadRatio: 1.5}, {Strategy: strategyCopy, RowsReadRatio: 1}})
	for _, want := range []string{"chunked 1.50 on the vacuumed table, 1.91 on a freshly loaded one (191 of 100 rows, 0 of them by index scans)", "copy 1.00 on the vacuumed table"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printed %q, want it to contain %q", b.String(), want)
		}
	}
}

func TestCallsInto(t *testing.T) {
	const ann = `
483,580,944 (78.66%)  < /w/pkg/codec/encoder.go:github.com/tidemark/cdc/pkg/replication.(*streamState).encodeInsert (120,099x)
      3,840 ( 0.00%)  < /w/pkg/codec/encoder.go:github.com/tidemark/cdc/pkg/replication.(*streamState).encodeInsert'2 (1x)
        100 ( 0.00%)  < /go/src/runtime/stack.go:runtime.newstack (1x)
483,584,784 (78.66%)  *  /w/pkg/codec/encoder.go:github.com/tidemark/cdc/pkg/codec.(*Encoder).simple [/tmp/replication.test]

 29,238,149 ( 4.76%)  < /w/pkg/codec/encoder.go:github.com/tidemark/cdc/pkg/codec.(*Encoder).simple (120,100x) [/tmp/replication.test]
 29,238,149 ( 4.76%)  *  /w/pkg/codec/arena.go:github.com/tidemark/cdc/pkg/codec.(*Encoder).lsnText [/tmp/replication.test]

  5,000 ( 0.00%)  < /w/pkg/replication/stream.go:github.com/tidemark/cdc/pkg/replication.(*streamState).change (10x)
  5,000 ( 0.00%)  *  /go/src/runtime/malloc.go:runtime.mallocgc
`
	if got, want := callsInto(ann, "github.com/tidemark/cdc/pkg/replication.", "github.com/tidemark/cdc/pkg/codec."), 483_580_944.0+3_840; got != want {
		t.Errorf("callsInto = %.0f, want %.0f (calls from the replication stage only)", got, want)
	}
}
