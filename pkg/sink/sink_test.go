package sink

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
)

func TestNewValidates(t *testing.T) {
	valid := Config{Brokers: []string{"127.0.0.1:9092"}, TransactionalID: "tidemark-slot", WatermarkTopic: "cdc.__watermarks"}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr []string // substrings; none means valid
	}{
		{name: "valid exactly-once by default", mutate: func(*Config) {}},
		{name: "valid at-least-once without transactional id", mutate: func(c *Config) { c.Delivery = AtLeastOnce; c.TransactionalID = "" }},
		{name: "exactly-once needs a transactional id", mutate: func(c *Config) { c.TransactionalID = "" }, wantErr: []string{"transactional id"}},
		{name: "unknown delivery", mutate: func(c *Config) { c.Delivery = "twice" }, wantErr: []string{`unknown delivery mode "twice"`}},
		{
			name:    "every problem at once",
			mutate:  func(c *Config) { c.Brokers = nil; c.WatermarkTopic = ""; c.Partitions = -1; c.MaxBatchBytes = -5 },
			wantErr: []string{"no Kafka brokers", "no watermark topic", "partitions -1", "max batch bytes -5"},
		},
		{name: "replication factor -1 is the broker default", mutate: func(c *Config) { c.ReplicationFactor = -1 }},
		{name: "replication factor -2", mutate: func(c *Config) { c.ReplicationFactor = -2 }, wantErr: []string{"replication factor -2"}},
		{name: "zstd compression", mutate: func(c *Config) { c.Compression = "zstd" }},
		{name: "unknown compression", mutate: func(c *Config) { c.Compression = "brotli" }, wantErr: []string{`unknown compression "brotli"`}},
		{name: "short transaction timeout", mutate: func(c *Config) { c.TransactionTimeout = time.Millisecond }, wantErr: []string{"transaction timeout"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid
			tc.mutate(&cfg)
			s, err := New(cfg)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				s.Close()
				return
			}
			if err == nil {
				s.Close()
				t.Fatalf("New succeeded, want an error mentioning %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestPingUnreachable(t *testing.T) {
	s, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Delivery: AtLeastOnce, WatermarkTopic: "w"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	err = s.Ping(ctx)
	if err == nil {
		t.Fatal("Ping of a closed port succeeded")
	}
	for _, w := range []string{"cannot reach Kafka at 127.0.0.1:1", "check CDC_KAFKA_BROKERS"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Ping error %q does not mention %q", err, w)
		}
	}
}

// silentBroker accepts connections and never answers.
func silentBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().String()
}

func TestPingSilentBroker(t *testing.T) {
	env := newFakeEnv(t)
	tests := []struct {
		name    string
		brokers []string
		wantErr string
	}{
		{"silent alone", []string{silentBroker(t)}, "no answer within the connect timeout of 1s"},
		{"silent first, a live one next", []string{silentBroker(t), env.brokers[0]}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{Brokers: tt.brokers, Delivery: AtLeastOnce, WatermarkTopic: "w", DialTimeout: time.Second})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer s.Close()
			start := time.Now()
			err = s.Ping(t.Context())
			took := time.Since(start)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Ping: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Ping: %v, want an error with %q", err, tt.wantErr)
			}
			if took > 5*time.Second {
				t.Errorf("Ping took %s, want about the 1s dial timeout at most", took)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	env := newFakeEnv(t)
	reg := prometheus.NewRegistry()
	cfg := env.config(t, ExactlyOnce)
	cfg.Registerer = reg
	s := env.newSink(t, cfg)
	topic := env.topic("m")
	if err := s.EnsureTopics(t.Context(), []TopicSpec{{Name: topic}}); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	// A second sink on the same registry (a restart) shares the series instead of failing.
	env.newSink(t, cfg)

	in := make(chan *change.Unit, 2)
	u1, u2 := dataUnit(topic, 10, "a", "b"), dataUnit(topic, 11, "c")
	in <- u1
	in <- u2
	close(in)
	if err := runSink(t, s, in, newFakeProgress(nil))(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	got := gather(t, reg)
	wantBytes := float64(u1.Records[0].Size() + u1.Records[1].Size() + u2.Records[0].Size())
	for name, want := range map[string]float64{
		"tidemark_sink_records_total":            3,
		"tidemark_sink_bytes_total":              wantBytes,
		"tidemark_sink_errors_total":             0,
		"tidemark_sink_transaction_aborts_total": 0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	if got["tidemark_sink_batches_total"] < 1 || got["tidemark_sink_batch_duration_seconds_count"] != got["tidemark_sink_batches_total"] {
		t.Errorf("batches %v, durations observed %v: want at least one, equal", got["tidemark_sink_batches_total"], got["tidemark_sink_batch_duration_seconds_count"])
	}
}

// gather returns counter values and histogram sample counts (as name_count) by name.
func gather(t testing.TB, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[mf.GetName()] += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()+"_count"] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestPartitionerLazy: a topic's partitioner makes kgo's sticky one (5 KiB of random source)
// only when a record needs a choice, and a keyed record lands where kgo's, like Java's
// default partitioner, puts it. At 10,000 topics of one partition the eager sticky
// partitioners held 62 MiB of a 206 MiB heap.
func TestPartitionerLazy(t *testing.T) {
	p := newPartitioner()
	tp := p.ForTopic("t").(*topicPartitioner)
	r := &kgo.Record{Topic: "t", Key: []byte("k1")}
	if got := tp.Partition(r, 1); got != 0 || tp.inner != nil {
		t.Fatalf("one partition: %d, inner made %v; want 0 without a sticky partitioner", got, tp.inner != nil)
	}
	if !tp.RequiresConsistency(r) || tp.RequiresConsistency(&kgo.Record{Topic: "t"}) {
		t.Error("a keyed record must require consistency, a keyless one not")
	}
	want := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for i := range 50 {
		r := &kgo.Record{Topic: "t", Key: fmt.Appendf(nil, "key-%d", i)}
		if got, w := tp.Partition(r, 12), want.Partition(r, 12); got != w {
			t.Fatalf("key %s: partition %d, kgo's %d", r.Key, got, w)
		}
	}
}
