package sink

import (
	"context"
	"fmt"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
)

// BenchmarkRun produces 100-byte records through Run to kfake, 100 records per unit, and
// reports records/s.
func BenchmarkRun(b *testing.B) {
	for _, d := range []Delivery{AtLeastOnce, ExactlyOnce} {
		b.Run(string(d), func(b *testing.B) {
			env := newFakeEnv(b)
			cfg := env.config(b, d)
			cfg.Partitions = 6
			s := env.newSink(b, cfg)
			topic := env.topic("bench")
			if err := s.EnsureTopics(b.Context(), []TopicSpec{{Name: topic, Compact: true}}); err != nil {
				b.Fatalf("EnsureTopics: %v", err)
			}
			const perUnit = 100
			value := make([]byte, 100)
			unit := &change.Unit{Kind: change.KindTxn, End: 1}
			for i := range perUnit {
				unit.Records = append(unit.Records, change.Record{
					Topic: topic, Partition: change.AnyPartition,
					Key: fmt.Appendf(nil, `{"id":%d}`, i), Value: value,
					Headers: []change.Header{{Key: "op", Value: []byte("c")}},
				})
			}
			in := make(chan *change.Unit, 64)
			p := newFakeProgress(nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx, in, p.serve(ctx)) }()

			units := 0
			b.ReportAllocs()
			b.SetBytes(perUnit * 100)
			for b.Loop() {
				in <- unit
				units++
			}
			close(in)
			if err := <-done; err != nil {
				b.Fatalf("Run: %v", err)
			}
			b.ReportMetric(float64(units*perUnit)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
