package integration

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestWatermarkTopicBadRecords: a watermark topic holding a record cdc cannot take (a record
// larger than any cdc writes, JSON that lies about its fields) stops cdc at start with exit 1
// and a message naming the topic, partition and offset of that record; a large record is never
// decoded into the start-up state.
func TestWatermarkTopicBadRecords(t *testing.T) {
	good := `{"version":1,"export":"public.t","topic":"x","state":"hydrating","watermark":null,"position":"0/0","offsets":{},"ts":"2026-01-01T00:00:00Z"}`
	for _, tc := range []struct {
		name  string
		value []byte
		want  string
	}{
		// Valid JSON of 17 MiB: cdc never writes a record of more than 16 MiB.
		{"larger than cdc writes", append(bytes.Repeat([]byte(" "), 17<<20), good...), "more than 16777216"},
		{"lying JSON", []byte(`{"version":1,"export":"public.t","state":"hydrated","offsets":{"0":1e999}}`), "decode watermark record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.exec(`CREATE TABLE t (id int PRIMARY KEY)`)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ProducerBatchMaxBytes(64<<20))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			big := strconv.Itoa(64 << 20)
			topic := e.watermarkTopic()
			if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": new("compact"), "max.message.bytes": &big}, topic); err != nil {
				t.Fatalf("create %s: %v", topic, err)
			}
			for _, v := range [][]byte{[]byte(good), tc.value, []byte(good)} {
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("public.t"), Value: v}).FirstErr(); err != nil {
					t.Fatalf("produce: %v", err)
				}
			}
			vars := e.baseVars()
			vars["CDC_TABLES"] = "public.t"
			res := runCDC(t, vars, 90*time.Second)
			if res.code != 1 {
				t.Fatalf("exit %d, want 1", res.code)
			}
			if where := fmt.Sprintf("%s partition 0 offset 1", topic); !strings.Contains(res.out, where) || !strings.Contains(res.out, tc.want) {
				t.Fatalf("output does not name %q and %q:\n%s", where, tc.want, tail(res.out, 3000))
			}
		})
	}
}
