package sink

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// produceValues produces key/value pairs to topic, in order, with a plain client allowed
// batches of batchBytes.
func produceValues(t testing.TB, env *testEnv, topic string, batchBytes int32, kvs ...[2][]byte) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.brokers...), kgo.ProducerBatchMaxBytes(batchBytes),
		kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer cl.Close()
	const chunk = 5000
	for len(kvs) > 0 {
		n := min(chunk, len(kvs))
		recs := make([]*kgo.Record, n)
		for i, kv := range kvs[:n] {
			recs[i] = &kgo.Record{Topic: topic, Key: kv[0], Value: kv[1]}
		}
		if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
		kvs = kvs[n:]
	}
}

// TestReadWatermarksKeepsLatest: a watermark topic of 20,000 records for 5 exports (as an old
// topic whose active segment was never compacted holds) is read keeping 7 decoded records (each
// export's latest, the quiet record, the checkpoint), and they are the latest.
func TestReadWatermarksKeepsLatest(t *testing.T) {
	env := newFakeEnv(t)
	ctx := t.Context()
	cfg := env.config(t, AtLeastOnce)
	s := env.newSink(t, cfg)
	if err := s.EnsureTopics(ctx, nil); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	const n, k = 20_000, 5
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var kvs [][2][]byte
	for i := range n {
		var key string
		var v []byte
		var err error
		w := change.LSN(i + 1)
		switch {
		case i%100 == 99:
			key = watermark.CheckpointKey
			v, err = watermark.EncodeCheckpoint(w, nil, t0)
		case i%100 == 98:
			key = watermark.QuietKey
			v, err = watermark.EncodeQuiet(watermark.Quiet{Mode: watermark.ModeIndependent, Watermark: &w, Position: w, Time: t0})
		default:
			e := change.ExportID{Schema: "public", Table: fmt.Sprintf("t%d", i%k)}
			key = e.String()
			v, err = watermark.Encode(watermark.Record{Export: e, Topic: "p." + e.String(), State: watermark.StateHydrated,
				Mode: watermark.ModeIndependent, Watermark: &w, Position: w, Offsets: map[int32]int64{0: int64(i)}, Time: t0})
		}
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, [2][]byte{[]byte(key), v})
	}
	produceValues(t, env, cfg.WatermarkTopic, 1<<20, kvs...)

	rd := watermark.NewTopicReader()
	read := 0
	most := 0
	err := s.ReadWatermarks(ctx, func(p int32, v []byte) error {
		read++
		err := rd.Add(p, v)
		most = max(most, rd.Retained())
		return err
	})
	if err != nil {
		t.Fatalf("ReadWatermarks: %v", err)
	}
	if read != n {
		t.Fatalf("read %d values, want %d", read, n)
	}
	if most != k+2 {
		t.Fatalf("at most %d decoded values retained while reading %d, want %d (one per export, quiet, checkpoint)", most, n, k+2)
	}
	recs, cp := rd.Result()
	if cp == nil || cp.Position != change.LSN(n) {
		t.Fatalf("checkpoint %+v, want position %s", cp, change.LSN(n))
	}
	if len(recs) != k {
		t.Fatalf("%d records, want %d", len(recs), k)
	}
	for _, r := range recs {
		// Each export's last own record is one of the last 100; the last quiet record (at
		// n-2) speaks for all of them and is higher.
		if r.Watermark == nil || *r.Watermark != change.LSN(n-1) || r.Offsets[0] < n-100 {
			t.Errorf("%s: watermark %v offsets %v, want %s from the last quiet record over an own record after %d", r.Export, r.Watermark, r.Offsets, change.LSN(n-1), n-100)
		}
	}
}

// TestReadWatermarksRefuses: a record that is not a watermark record, or that is larger than
// the sink ever writes, stops the read with an error naming topic, partition and offset; it
// is never kept or decoded past the bound.
func TestReadWatermarksRefuses(t *testing.T) {
	good, err := watermark.Encode(watermark.Record{Export: change.ExportID{Schema: "public", Table: "a"}, State: watermark.StateHydrated})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		value []byte
		want  string
	}{
		{"lying JSON", []byte(`{"version":1,"export":"public.a","state":"hydrated","offsets":{"0":99999999999999999999999}}`), "decode watermark record"},
		{"truncated JSON", good[:len(good)/2], "decode watermark record"},
		{"version from the future", []byte(`{"version":7,"export":"public.a","state":"hydrated"}`), "newer than"},
		{"record larger than the sink writes", append(bytes.Repeat([]byte(" "), MaxRecordBytes), good...), "more than 16777216"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newFakeEnv(t)
			ctx := t.Context()
			cfg := env.config(t, AtLeastOnce)
			// The topic exists already and takes larger records than the sink writes.
			big := strconv.Itoa(4 * MaxRecordBytes)
			if _, err := env.admin(t).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": new("compact"), "max.message.bytes": &big}, cfg.WatermarkTopic); err != nil {
				t.Fatalf("create topic: %v", err)
			}
			s := env.newSink(t, cfg)
			if err := s.EnsureTopics(ctx, nil); err != nil {
				t.Fatalf("EnsureTopics: %v", err)
			}
			produceValues(t, env, cfg.WatermarkTopic, 4*MaxRecordBytes,
				[2][]byte{[]byte("public.a"), good}, [2][]byte{[]byte("public.a"), good}, [2][]byte{[]byte("public.a"), tc.value}, [2][]byte{[]byte("public.a"), good})
			rd := watermark.NewTopicReader()
			seen := 0
			err := s.ReadWatermarks(ctx, func(p int32, v []byte) error {
				seen++
				return rd.Add(p, v)
			})
			var re *RecordError
			if !errors.As(err, &re) {
				t.Fatalf("ReadWatermarks = %v, want a *RecordError", err)
			}
			if re.Topic != cfg.WatermarkTopic || re.Partition != 0 || re.Offset != 2 {
				t.Fatalf("refused %s partition %d offset %d, want %s partition 0 offset 2", re.Topic, re.Partition, re.Offset, cfg.WatermarkTopic)
			}
			if msg := err.Error(); !strings.Contains(msg, "offset 2") || !strings.Contains(msg, cfg.WatermarkTopic) || !strings.Contains(msg, tc.want) {
				t.Fatalf("error %q does not name the topic, the offset and %q", msg, tc.want)
			}
			if len(err.Error()) > 1000 {
				t.Fatalf("error of %d bytes quotes the record", len(err.Error()))
			}
			if tc.name == "record larger than the sink writes" && seen != 2 {
				t.Fatalf("fn saw %d values, want the 2 before the large one", seen)
			}
			t.Log(err)
		})
	}
}

// scenarioWatermarkTopicSegments: the watermark topic gets segment settings that let compaction
// reach its records: when created, and when it exists and inherits the broker's (7 days, 1 GiB).
// A value set on the topic by hand is left alone.
func scenarioWatermarkTopicSegments(t *testing.T, env *testEnv) {
	ctx := t.Context()
	adm := env.admin(t)
	want := map[string]string{
		"segment.ms":     strconv.Itoa(WatermarkSegmentMS),
		"segment.bytes":  strconv.Itoa(WatermarkSegmentBytes),
		"cleanup.policy": "compact",
	}
	// check waits up to a minute for topic's configuration to read want: the broker applies a
	// change through its metadata log, and a loaded one answers a describe from a cache that
	// can lag the change by seconds.
	check := func(topic string, want map[string]string) {
		t.Helper()
		var wrong []string
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			rcs, err := adm.DescribeTopicConfigs(ctx, topic)
			if err != nil {
				t.Fatalf("describe %s: %v", topic, err)
			}
			rc, err := rcs.On(topic, nil)
			if err != nil {
				t.Fatalf("describe %s: %v", topic, err)
			}
			got := map[string]string{}
			for _, c := range rc.Configs {
				if _, ok := want[c.Key]; ok {
					got[c.Key] = deref(c.Value)
				}
			}
			wrong = wrong[:0]
			for _, k := range slices.Sorted(maps.Keys(want)) {
				if got[k] != want[k] {
					wrong = append(wrong, fmt.Sprintf("%s = %q, want %q", k, got[k], want[k]))
				}
			}
			if len(wrong) == 0 || time.Now().After(deadline) {
				break
			}
		}
		for _, w := range wrong {
			t.Errorf("%s: %s", topic, w)
		}
	}
	// Created by EnsureTopics.
	cfg := env.config(t, AtLeastOnce)
	if err := env.newSink(t, cfg).EnsureTopics(ctx, nil); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	check(cfg.WatermarkTopic, want)

	// Existing, made by an earlier version: compacted, segments inherited.
	old := cfg
	old.WatermarkTopic = env.topic("__watermarks_old")
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": new("compact")}, old.WatermarkTopic); err != nil {
		t.Fatalf("create %s: %v", old.WatermarkTopic, err)
	}
	if err := env.newSink(t, old).EnsureTopics(ctx, nil); err != nil {
		t.Fatalf("EnsureTopics (existing topic): %v", err)
	}
	check(old.WatermarkTopic, want)

	// Existing, with segment.ms chosen by its operator: left as it is.
	own := cfg
	own.WatermarkTopic = env.topic("__watermarks_own")
	week := strconv.Itoa(7 * 24 * 3600 * 1000)
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": new("compact"), "segment.ms": &week}, own.WatermarkTopic); err != nil {
		t.Fatalf("create %s: %v", own.WatermarkTopic, err)
	}
	if err := env.newSink(t, own).EnsureTopics(ctx, nil); err != nil {
		t.Fatalf("EnsureTopics (topic with its own segment.ms): %v", err)
	}
	check(own.WatermarkTopic, map[string]string{"segment.ms": week, "segment.bytes": want["segment.bytes"]})
}
