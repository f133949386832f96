package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/watermark"
)

// BenchmarkReader compares, in one run against the real broker (CDC_TEST_KAFKA_BROKERS; skipped
// with -short), the reader's records/s with a plain franz-go read-committed consumer of the same
// topics: two tables of three partitions, 100,000 transactions of two changes each, written the
// way cdc writes them. The plain consumer decodes each envelope with encoding/json (what a
// hand-made consumer needs to learn source.lsn and txId), and, as a floor, only fetches.
//
//	go test -run '^$' -bench BenchmarkReader -benchtime 3x ./pkg/consumer/
func BenchmarkReader(b *testing.B) {
	brokers := testenv.Brokers(b)
	f := newFakeOn(b, brokers, 3, codec.FormatJSON)
	x, y := f.table("x"), f.table("y")
	f.step(func() {
		f.mark(x, hydrated, 10, 1, nil)
		f.mark(y, hydrated, 10, 1, nil)
	})
	const txns = 100_000
	for i := range txns {
		lsn := change.LSN(100 + 10*i)
		f.insert(x, lsn, uint32(i), 0, i, "a reasonably sized text value")
		f.insert(y, lsn, uint32(i), 1, i, "another reasonably sized value")
		if i%2000 == 1999 {
			f.step(func() {
				f.mark(x, hydrated, lsn+1, 1, nil)
				f.mark(y, hydrated, lsn+1, 1, nil)
			})
		}
	}
	f.step(nil)
	const total = 2 * txns
	topics := []string{f.topic(x), f.topic(y)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	plain := func(decode bool) time.Duration {
		start := time.Now()
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		n := 0
		for n < total {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				b.Fatal(err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if decode {
					var env struct {
						Before, After json.RawMessage
						Op            string
						Source        struct {
							LSN      uint64 `json:"lsn"`
							TxID     uint32 `json:"txId"`
							Sequence int64  `json:"sequence"`
						}
					}
					if err := json.Unmarshal(r.Value, &env); err != nil {
						b.Fatal(err)
					}
				}
				n++
			})
		}
		return time.Since(start)
	}
	reader := func() time.Duration {
		start := time.Now()
		rd, err := New(Config{Brokers: brokers, WatermarkTopic: f.wmTopic, Tables: []change.ExportID{x, y}})
		if err != nil {
			b.Fatal(err)
		}
		defer rd.Close()
		n := 0
		for n < total {
			c, err := rd.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n += c.Changes()
		}
		return time.Since(start)
	}
	var tBare, tPlain, tReader time.Duration
	for b.Loop() {
		tBare += plain(false)
		tPlain += plain(true)
		tReader += reader()
	}
	rate := func(d time.Duration) float64 { return float64(total*b.N) / d.Seconds() }
	b.ReportMetric(rate(tReader), "reader_records/s")
	b.ReportMetric(rate(tPlain), "plain_decoding_records/s")
	b.ReportMetric(rate(tBare), "plain_fetch_only_records/s")
	b.ReportMetric(rate(tReader)/rate(tPlain), "ratio_vs_plain_decoding")
	b.ReportMetric(rate(tReader)/rate(tBare), "ratio_vs_fetch_only")
	b.Logf("records/s: reader %.0f, plain decoding %.0f (ratio %.2f), plain fetch only %.0f (ratio %.2f)",
		rate(tReader), rate(tPlain), rate(tReader)/rate(tPlain), rate(tBare), rate(tReader)/rate(tBare))
}

// BenchmarkCutSize measures the reader's own work per change (decoding, merging the
// partitions, grouping; no Kafka) as the number of changes in one cut or load grows, to show
// it is linear: ns/change should stay flat from 10,000 to 1,000,000. Three shapes:
//
//   - load: a joining table's copy, every row sharing one (LSN, txId, sequence), as the rows of
//     a chunk do (c9cb695 grouped them in quadratic time: 40,000 took 1.45 s);
//   - txn: one source transaction of n changes in one cut;
//   - txns: n one-change transactions in one cut.
//
// Records are fed as Kafka would, a few MiB per partition at a time, and taken in parts.
//
//	go test -run '^$' -bench BenchmarkCutSize -benchtime 3x ./pkg/consumer/
func BenchmarkCutSize(b *testing.B) {
	for _, shape := range []string{"load", "txn", "txns"} {
		for _, n := range []int{10_000, 100_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/%d", shape, n), func(b *testing.B) { benchCut(b, shape, n) })
		}
	}
}

func benchCut(b *testing.B, shape string, n int) {
	const parts = 3
	e := change.ExportID{Schema: "public", Table: "t"}
	enc, err := codec.NewEncoder(codec.Config{TopicPrefix: "b", Database: "db", Tombstones: true},
		&change.Table{Export: e, Columns: []change.Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}, {Name: "v", TypeOID: 25, TypeMod: -1}}})
	if err != nil {
		b.Fatal(err)
	}
	topic := enc.Topic()
	type rec struct {
		p          int32
		key, value []byte
	}
	recs := make([]rec, 0, n)
	for i := range n {
		var out []change.Record
		switch shape {
		case "load":
			s := src(99, 0, 0)
			s.Snapshot, s.Attempt = true, 1
			out, err = enc.Read(nil, s, row(i, "a reasonably sized text value"))
		case "txn":
			out, err = enc.Insert(nil, src(200, 7, int64(i)), row(i, "a reasonably sized text value"))
		default:
			out, err = enc.Insert(nil, src(change.LSN(200+i), uint32(i), 0), row(i, "a reasonably sized text value"))
		}
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, rec{p: int32(i % parts), key: out[0].Key, value: out[0].Value})
	}
	counts := map[int32]int64{}
	for _, r := range recs {
		counts[r.p]++
	}
	mark := func(st *state, w change.LSN, full bool) {
		r := watermark.Record{Export: e, Topic: topic, State: watermark.StateHydrated, Watermark: &w, Position: w,
			Offsets: map[int32]int64{}, Snapshot: &watermark.SnapshotInfo{Attempt: 1, StartOffsets: map[int32]int64{}}}
		for p := range int32(parts) {
			r.Offsets[p], r.Snapshot.StartOffsets[p] = 0, 0
			if full {
				r.Offsets[p] = counts[p]
			}
		}
		v, err := watermark.Encode(r)
		if err != nil {
			b.Fatal(err)
		}
		if err := st.addWatermark(v, ""); err != nil {
			b.Fatal(err)
		}
	}
	drain := func(st *state) (changes int, final bool) {
		for {
			part, err := st.nextPart(10_000, 16<<20)
			if err != nil {
				b.Fatal(err)
			}
			if part == nil {
				return changes, final
			}
			changes += part.Changes()
			final = final || part.Final && (shape == "load") == (part.Load != nil)
		}
	}
	for b.Loop() {
		st := newState(nil, false)
		if shape == "load" {
			mark(st, 100, true)
		} else {
			mark(st, 100, false)
			drain(st) // the empty load and the joining cut
			mark(st, 100_000_000, true)
		}
		next := make([]int64, parts)
		got, done := 0, false
		for i := 0; i < len(recs); {
			// A few MiB per partition, then what can be taken.
			for fed := 0; fed < 3*(4<<20) && i < len(recs); i++ {
				r := recs[i]
				if err := st.addRecord(topic, r.p, next[r.p], false, r.key, r.value, nil); err != nil {
					b.Fatal(err)
				}
				next[r.p]++
				fed += len(r.value)
			}
			c, f := drain(st)
			got, done = got+c, done || f
		}
		if got != n || !done {
			b.Fatalf("%d changes taken of %d (done %v)", got, n, done)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/change")
}
