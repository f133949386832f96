package consumer

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/integration/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
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
