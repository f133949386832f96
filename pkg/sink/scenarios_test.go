package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
)

// scenarios run against kfake (TestSinkFake) and, when CDC_TEST_KAFKA_BROKERS is set, against
// a real broker (TestSinkRealKafka).
var scenarios = []struct {
	name string
	run  func(t *testing.T, env *testEnv)
}{
	{"EnsureTopics", scenarioEnsureTopics},
	{"WatermarkTopicSegments", scenarioWatermarkTopicSegments},
	{"RunAtLeastOnce", func(t *testing.T, env *testEnv) { scenarioRun(t, env, AtLeastOnce) }},
	{"RunExactlyOnce", func(t *testing.T, env *testEnv) { scenarioRun(t, env, ExactlyOnce) }},
	{"AllPartitions", scenarioAllPartitions},
	{"KeyPartitioning", scenarioKeyPartitioning},
	{"ReadWatermarks", scenarioReadWatermarks},
	{"ReadWatermarksResolvesOpenTransaction", func(t *testing.T, env *testEnv) { scenarioReadWatermarksOpenTxn(t, env, "") }},
	{"ReadWatermarksResolvesOpenLargeTransaction", func(t *testing.T, env *testEnv) {
		scenarioReadWatermarksOpenTxn(t, env, LargeTransactionalIDSuffix)
	}},
	{"Fenced", scenarioFenced},
	{"FencedLarge", scenarioFencedLarge},
	{"LargeRecordsExactlyOnce", func(t *testing.T, env *testEnv) { scenarioLargeRecords(t, env, ExactlyOnce) }},
	{"LargeRecordsAtLeastOnce", func(t *testing.T, env *testEnv) { scenarioLargeRecords(t, env, AtLeastOnce) }},
	{"FailedBatchAtLeastOnce", func(t *testing.T, env *testEnv) { scenarioFailedBatch(t, env, AtLeastOnce) }},
	{"FailedBatchExactlyOnce", func(t *testing.T, env *testEnv) { scenarioFailedBatch(t, env, ExactlyOnce) }},
	{"Heartbeats", scenarioHeartbeats},
	{"ScanRightAfterCommit", scenarioScanRightAfterCommit},
	{"BulkBatchLimit", scenarioBulkBatchLimit},
}

func TestSinkFake(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, newFakeEnv(t))
		})
	}
}

func TestSinkRealKafka(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			sc.run(t, newRealEnv(t))
		})
	}
}

func scenarioEnsureTopics(t *testing.T, env *testEnv) {
	ctx := t.Context()
	adm := env.admin(t)
	keyed, keyless, pre := env.topic("keyed"), env.topic("keyless"), env.topic("pre")
	// A topic that exists already, with another partition count and three records in it.
	if _, err := adm.CreateTopic(ctx, 5, 1, nil, pre); err != nil {
		t.Fatalf("pre-create %s: %v", pre, err)
	}
	cfg := env.config(t, AtLeastOnce)
	s := env.newSink(t, cfg)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if err := s.EnsureTopics(ctx, []TopicSpec{{Name: pre}}); err != nil {
		t.Fatalf("EnsureTopics (pre only): %v", err)
	}
	in := make(chan *change.Unit, 1)
	in <- &change.Unit{Kind: change.KindTxn, End: 10, Records: []change.Record{
		{Topic: pre, Partition: 4, Value: []byte("a")},
		{Topic: pre, Partition: 4, Value: []byte("b")},
		{Topic: pre, Partition: 1, Value: []byte("c")},
	}}
	close(in)
	if err := runSink(t, s, in, newFakeProgress(nil))(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// The pipeline names the watermark topic too: it keeps its one partition.
	specs := []TopicSpec{{Name: keyed, Compact: true}, {Name: keyless}, {Name: pre}, {Name: cfg.WatermarkTopic, Compact: true}}
	for i := range 2 { // the second call must be a no-op
		s := env.newSink(t, cfg)
		if err := s.EnsureTopics(ctx, specs); err != nil {
			t.Fatalf("EnsureTopics #%d: %v", i+1, err)
		}
		for _, tc := range []struct {
			topic      string
			partitions int32
		}{{keyed, 3}, {keyless, 3}, {pre, 5}, {cfg.WatermarkTopic, 1}} {
			if got := s.Partitions(tc.topic); got != tc.partitions {
				t.Errorf("call %d: Partitions(%s) = %d, want %d", i+1, tc.topic, got, tc.partitions)
			}
		}
		if got, want := s.EndOffsets(pre), map[int32]int64{0: 0, 1: 1, 2: 0, 3: 0, 4: 2}; !mapsEqual(got, want) {
			t.Errorf("call %d: EndOffsets(pre) = %v, want %v", i+1, got, want)
		}
		if got := s.EndOffsets(keyed); len(got) != 3 || got[0] != 0 {
			t.Errorf("call %d: EndOffsets(keyed) = %v, want 3 partitions at 0", i+1, got)
		}
	}
	details, err := adm.ListTopics(ctx, keyed, keyless, cfg.WatermarkTopic)
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	for _, tc := range []struct {
		topic      string
		partitions int
		compact    bool
	}{{keyed, 3, true}, {keyless, 3, false}, {cfg.WatermarkTopic, 1, true}} {
		if got := len(details[tc.topic].Partitions); got != tc.partitions {
			t.Errorf("%s has %d partitions, want %d", tc.topic, got, tc.partitions)
		}
		rcs, err := adm.DescribeTopicConfigs(ctx, tc.topic)
		if err != nil {
			t.Fatalf("describe configs of %s: %v", tc.topic, err)
		}
		rc, err := rcs.On(tc.topic, nil)
		if err != nil {
			t.Fatalf("describe configs of %s: %v", tc.topic, err)
		}
		policy := ""
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil {
				policy = *c.Value
			}
		}
		if got := strings.Contains(policy, "compact"); got != tc.compact {
			t.Errorf("%s has cleanup.policy %q, want compacted=%v", tc.topic, policy, tc.compact)
		}
	}

	// A keyless table whose existing topic is compacted is refused.
	err = env.newSink(t, cfg).EnsureTopics(ctx, []TopicSpec{{Name: keyed, Compact: false}})
	if err == nil || !strings.Contains(err.Error(), "compacted but its table has no key") {
		t.Errorf("EnsureTopics on a compacted topic for a keyless table: err = %v, want a refusal", err)
	}
}

// scenarioRun sends units to two topics; Progress answers each batch with a watermark record.
func scenarioRun(t *testing.T, env *testEnv, d Delivery) {
	ctx := t.Context()
	cfg := env.config(t, d)
	s := env.newSink(t, cfg)
	a, b := env.topic("a"), env.topic("b")
	if err := s.EnsureTopics(ctx, []TopicSpec{{Name: a, Compact: true}, {Name: b}}); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	p := newFakeProgress(func(n int, units []*change.Unit) []change.Record {
		if len(units) == 0 {
			return nil
		}
		return []change.Record{{
			Topic: cfg.WatermarkTopic, Partition: change.AnyPartition,
			Key: []byte("wm"), Value: fmt.Appendf(nil, "wm-%d-%s", n, units[len(units)-1].End),
		}}
	})
	in := make(chan *change.Unit)
	wait := runSink(t, s, in, p)
	var units []*change.Unit
	for i := range 40 {
		end := change.LSN(100 + i)
		u := dataUnit(a, end, fmt.Sprintf("k%d", i%7), fmt.Sprintf("k%d", (i+3)%7))
		if i%3 == 0 {
			keyless := dataUnit(b, end, "b").Records[0]
			keyless.Key = nil
			u.Records = append(u.Records, keyless)
		}
		units = append(units, u)
	}
	for i, u := range units {
		in <- u
		if i == 19 { // let a batch finish in the middle, so there are several
			p.waitCommittedUnits(t, 20)
		}
	}
	close(in)
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	events, calls := p.calls()
	if len(calls) < 2 {
		t.Errorf("Durable called %d times, want at least 2 batches", len(calls))
	}
	if want := strings.Repeat("DC", len(calls)); strings.Join(events, "") != want {
		t.Errorf("calls = %s, want Durable and Committed alternating (%s)", strings.Join(events, ""), want)
	}
	var got []*change.Unit
	for _, c := range calls {
		got = append(got, c.units...)
	}
	if !slices.Equal(got, units) {
		t.Fatalf("Durable saw %d units, want the %d sent, in order", len(got), len(units))
	}

	// Every record is in Kafka, with its headers, in unit order per partition.
	byValue := map[string]*kgo.Record{}
	for _, topic := range []string{a, b} {
		for _, r := range env.consume(t, topic, true) {
			byValue[string(r.Value)] = r
		}
	}
	seen, lastOffset := 0, map[string]map[int32]int64{}
	for ci, c := range calls {
		for _, u := range c.units {
			for _, rec := range u.Records {
				r, ok := byValue[string(rec.Value)]
				if !ok {
					t.Fatalf("record %s not in topic %s", rec.Value, rec.Topic)
				}
				seen++
				if !bytes.Equal(r.Key, rec.Key) || len(r.Headers) != 2 ||
					r.Headers[0].Key != "lsn" || string(r.Headers[0].Value) != u.End.String() || r.Headers[1].Key != "op" {
					t.Errorf("record %s: key %q headers %v, want key %q and lsn/op headers", rec.Value, r.Key, r.Headers, rec.Key)
				}
				if lastOffset[r.Topic] == nil {
					lastOffset[r.Topic] = map[int32]int64{}
				}
				if prev, ok := lastOffset[r.Topic][r.Partition]; ok && r.Offset <= prev {
					t.Errorf("record %s at offset %d is not after the previous unit's record at %d", rec.Value, r.Offset, prev)
				}
				lastOffset[r.Topic][r.Partition] = r.Offset
			}
		}
		// The offsets Durable got are exactly the next offsets after the records of all units
		// so far, as a consumer sees them.
		for topic, parts := range lastOffset {
			for part, off := range parts {
				if got := c.offsets[topic][part]; got != off+1 {
					t.Errorf("Durable call %d: offsets[%s][%d] = %d, consumer says %d", ci+1, topic, part, got, off+1)
				}
			}
		}
	}
	if len(byValue) != seen {
		t.Errorf("topics hold %d records, units had %d", len(byValue), seen)
	}

	// One watermark record per batch, in order.
	wms, err := readWatermarks(ctx, env.newSink(t, cfg))
	if err != nil {
		t.Fatalf("ReadWatermarks: %v", err)
	}
	if len(wms) != len(calls) {
		t.Fatalf("read %d watermark records, want %d", len(wms), len(calls))
	}
	for i, c := range calls {
		want := fmt.Sprintf("wm-%d-%s", i+1, c.units[len(c.units)-1].End)
		if string(wms[i]) != want {
			t.Errorf("watermark %d = %s, want %s", i, wms[i], want)
		}
	}
}

func scenarioAllPartitions(t *testing.T, env *testEnv) {
	ctx := t.Context()
	cfg := env.config(t, ExactlyOnce)
	cfg.Partitions = 4
	s := env.newSink(t, cfg)
	topic := env.topic("trunc")
	if err := s.EnsureTopics(ctx, []TopicSpec{{Name: topic}}); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	in := make(chan *change.Unit, 1)
	in <- &change.Unit{Kind: change.KindTxn, End: 5, Records: []change.Record{
		{Topic: topic, Partition: change.AllPartitions, Key: []byte("t"), Value: []byte("truncate")},
		{Topic: topic, Partition: 2, Value: []byte("explicit-2")},
	}}
	close(in)
	if err := runSink(t, s, in, newFakeProgress(nil))(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	got := map[string][]int32{}
	for _, r := range env.consume(t, topic, true) {
		got[string(r.Value)] = append(got[string(r.Value)], r.Partition)
	}
	slices.Sort(got["truncate"])
	if !slices.Equal(got["truncate"], []int32{0, 1, 2, 3}) {
		t.Errorf("truncate record in partitions %v, want one copy in each of 0..3", got["truncate"])
	}
	if !slices.Equal(got["explicit-2"], []int32{2}) {
		t.Errorf("explicit record in partitions %v, want [2]", got["explicit-2"])
	}
}

// javaPartitions are what Kafka's Java client (Utils.toPositive(Utils.murmur2(key)) % n) picks,
// computed with kafka-clients 4.1.1, for 3, 7 and 12 partitions.
var javaPartitions = []struct {
	key     string
	p3, p7  int32
	p12     int32
	murmur2 int32
}{
	{"21", 0, 3, 0, -973932308},
	{"foobar", 0, 0, 6, -790332482},
	{"a-little-bit-long-string", 2, 1, 8, -985981536},
	{`{"id":1}`, 0, 3, 0, -56768732},
	{`{"id":42}`, 1, 4, 1, 486015037},
	{`{"id":"abc"}`, 2, 4, 5, 205642217},
	{"tidemark", 2, 6, 11, 291391967},
}

func scenarioKeyPartitioning(t *testing.T, env *testEnv) {
	ctx := t.Context()
	cfg := env.config(t, AtLeastOnce)
	cfg.Partitions = 7
	s := env.newSink(t, cfg)
	topic := env.topic("keys")
	if err := s.EnsureTopics(ctx, []TopicSpec{{Name: topic, Compact: true}}); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	u := &change.Unit{Kind: change.KindTxn, End: 1}
	for _, k := range javaPartitions {
		u.Records = append(u.Records, change.Record{Topic: topic, Partition: change.AnyPartition, Key: []byte(k.key), Value: []byte(k.key)})
	}
	in := make(chan *change.Unit, 1)
	in <- u
	close(in)
	if err := runSink(t, s, in, newFakeProgress(nil))(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	got := map[string]int32{}
	for _, r := range env.consume(t, topic, true) {
		got[string(r.Key)] = r.Partition
	}
	for _, k := range javaPartitions {
		if p, ok := got[k.key]; !ok || p != k.p7 {
			t.Errorf("key %s landed in partition %d (found %v), Java puts it in %d", k.key, p, ok, k.p7)
		}
	}
}

func TestPartitionerMatchesJava(t *testing.T) {
	for _, k := range javaPartitions {
		t.Run(k.key, func(t *testing.T) {
			tp := newPartitioner().ForTopic("t")
			r := &kgo.Record{Key: []byte(k.key), Partition: change.AnyPartition}
			if !tp.RequiresConsistency(r) {
				t.Errorf("keyed record does not require consistent partitioning")
			}
			for _, c := range []struct{ n, want int32 }{{3, k.p3}, {7, k.p7}, {12, k.p12}} {
				if got := tp.Partition(r, int(c.n)); int32(got) != c.want {
					t.Errorf("%d partitions: got %d, Java %d", c.n, got, c.want)
				}
			}
			if got := int32(uint32(k.murmur2)&0x7fffffff) % 7; got != k.p7 {
				t.Fatalf("table inconsistent: murmur2 %d gives %d, not %d", k.murmur2, got, k.p7)
			}
		})
	}
}

func scenarioReadWatermarks(t *testing.T, env *testEnv) {
	ctx := t.Context()
	cfg := env.config(t, ExactlyOnce)
	s := env.newSink(t, cfg)
	if got, err := readWatermarks(ctx, s); err != nil || len(got) != 0 {
		t.Fatalf("ReadWatermarks before the topic exists = %q, %v; want nothing", got, err)
	}
	if err := s.EnsureTopics(ctx, nil); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	if got, err := readWatermarks(ctx, s); err != nil || len(got) != 0 {
		t.Fatalf("ReadWatermarks of an empty topic = %q, %v; want nothing", got, err)
	}
	produceTxn(t, env, cfg.WatermarkTopic, env.prefix+".other", true, "w1", "w2")
	produceTxn(t, env, cfg.WatermarkTopic, env.prefix+".other", false, "aborted")
	produceTxn(t, env, cfg.WatermarkTopic, env.prefix+".other", true, "w3")
	produceTxn(t, env, cfg.WatermarkTopic, env.prefix+".other", false, "aborted-last")

	for _, d := range []Delivery{ExactlyOnce, AtLeastOnce} {
		got, err := readWatermarks(ctx, env.newSink(t, env.config(t, d)))
		if err != nil {
			t.Fatalf("%s: ReadWatermarks: %v", d, err)
		}
		if want := []string{"w1", "w2", "w3"}; !slices.Equal(strs(got), want) {
			t.Errorf("%s: ReadWatermarks = %q, want %q", d, got, want)
		}
	}
}

// scenarioReadWatermarksOpenTxn leaves a transaction open under the sink's transactional id
// (with suffix: the large producer's), as a crashed instance would; ReadWatermarks must
// resolve (abort) it and not return its records.
func scenarioReadWatermarksOpenTxn(t *testing.T, env *testEnv, suffix string) {
	ctx := t.Context()
	cfg := env.config(t, ExactlyOnce)
	if err := env.newSink(t, cfg).EnsureTopics(ctx, nil); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	produceTxn(t, env, cfg.WatermarkTopic, cfg.TransactionalID, true, "w1")
	cl := txnClient(t, env, cfg.TransactionalID+suffix)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: cfg.WatermarkTopic, Key: []byte("k"), Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	got, err := readWatermarks(ctx, env.newSink(t, cfg))
	if err != nil {
		t.Fatalf("ReadWatermarks: %v", err)
	}
	if want := []string{"w1"}; !slices.Equal(strs(got), want) {
		t.Errorf("ReadWatermarks = %q, want %q", got, want)
	}
}

func scenarioFenced(t *testing.T, env *testEnv) {
	ctx := t.Context()
	cfg := env.config(t, ExactlyOnce)
	first := env.newSink(t, cfg)
	topic := env.topic("data")
	if err := first.EnsureTopics(ctx, []TopicSpec{{Name: topic}}); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	p := newFakeProgress(nil)
	in := make(chan *change.Unit)
	wait := runSink(t, first, in, p)
	in <- dataUnit(topic, 10, "a")
	p.waitCommittedUnits(t, 1)

	second := env.newSink(t, cfg)
	if err := second.Init(ctx); err != nil {
		t.Fatalf("second Init: %v", err)
	}
	in <- dataUnit(topic, 11, "b")
	close(in)
	err := wait()
	if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "another instance with transactional id") {
		t.Fatalf("Run of the fenced sink = %v, want an ErrFenced error naming the takeover", err)
	}
	if got := strs(values(env.consume(t, topic, true))); !slices.Equal(got, []string{"a@10#0"}) {
		t.Errorf("committed records = %q, want only the first unit's", got)
	}
}

// scenarioFailedBatch sends a batch whose last record cannot be produced (partition 99 of a
// 3-partition topic): Run fails, Durable is never called for it and, in exactly-once mode, a
// read-committed consumer sees none of the batch although its valid records reached Kafka.
func scenarioFailedBatch(t *testing.T, env *testEnv, d Delivery) {
	ctx := t.Context()
	cfg := env.config(t, d)
	s := env.newSink(t, cfg)
	topic := env.topic("data")
	if err := s.EnsureTopics(ctx, []TopicSpec{{Name: topic}}); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	p := newFakeProgress(nil)
	in := make(chan *change.Unit, 2)
	good := dataUnit(topic, 10, "a", "b", "c")
	bad := dataUnit(topic, 11, "d")
	bad.Records = append(bad.Records, change.Record{Topic: topic, Partition: 99, Value: []byte("nowhere")})
	in <- good
	in <- bad
	close(in)
	err := runSink(t, s, in, p)()
	if err == nil || !strings.Contains(err.Error(), "partition") {
		t.Fatalf("Run = %v, want a produce error", err)
	}
	if _, calls := p.calls(); len(calls) != 0 {
		t.Errorf("Durable called %d times for a failed batch", len(calls))
	}
	written := env.consume(t, topic, false)
	if len(written) != 4 {
		t.Errorf("%d records reached Kafka, want the 4 valid ones", len(written))
	}
	committed := env.consume(t, topic, true)
	switch d {
	case ExactlyOnce:
		if len(committed) != 0 {
			t.Errorf("read-committed consumer sees %q of an aborted batch", strs(values(committed)))
		}
	case AtLeastOnce:
		if len(committed) != 4 {
			t.Errorf("read-committed consumer sees %d records, want 4 (no transactions)", len(committed))
		}
	}
}

// scenarioHeartbeats runs with no units: Durable(nil) is called every tick and its records are
// produced and committed.
func scenarioHeartbeats(t *testing.T, env *testEnv) {
	ctx := t.Context()
	cfg := env.config(t, ExactlyOnce)
	s := env.newSink(t, cfg)
	if err := s.EnsureTopics(ctx, nil); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	p := newFakeProgress(func(n int, units []*change.Unit) []change.Record {
		if len(units) != 0 || n > 3 {
			return nil
		}
		return []change.Record{{Topic: cfg.WatermarkTopic, Partition: change.AnyPartition, Key: []byte("hb"), Value: fmt.Appendf(nil, "hb-%d", n)}}
	})
	in := make(chan *change.Unit)
	wait := runSink(t, s, in, p)
	for {
		events, _ := p.calls()
		if len(events) >= 10 {
			break
		}
		<-p.signal
	}
	close(in)
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	got, err := readWatermarks(ctx, env.newSink(t, cfg))
	if err != nil {
		t.Fatalf("ReadWatermarks: %v", err)
	}
	if want := []string{"hb-1", "hb-2", "hb-3"}; !slices.Equal(strs(got), want) {
		t.Errorf("heartbeats = %q, want %q", got, want)
	}
}

// txnClient is a raw transactional producer, standing in for another writer.
func txnClient(t testing.TB, env *testEnv, txnID string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.brokers...), kgo.TransactionalID(txnID))
	if err != nil {
		t.Fatalf("transactional client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceTxn produces values in one transaction and commits or aborts it.
func produceTxn(t testing.TB, env *testEnv, topic, txnID string, commit bool, vals ...string) {
	t.Helper()
	ctx := t.Context()
	cl := txnClient(t, env, txnID)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	for _, v := range vals {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction: %v", err)
	}
	cl.Close()
}

func values(rs []*kgo.Record) [][]byte {
	out := make([][]byte, len(rs))
	for i, r := range rs {
		out[i] = r.Value
	}
	return out
}

func strs(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

func mapsEqual(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestCancelAbortsOpenTransaction cancels Run while a batch is open in exactly-once mode: Run
// returns the context's error and the batch's records, although written, never become visible;
// the abort is counted.
func TestCancelAbortsOpenTransaction(t *testing.T) {
	env := newFakeEnv(t)
	cfg := env.config(t, ExactlyOnce)
	cfg.Linger = time.Minute
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	s := env.newSink(t, cfg)
	topic := env.topic("data")
	if err := s.EnsureTopics(t.Context(), []TopicSpec{{Name: topic}}); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	in := make(chan *change.Unit, 1)
	p := newFakeProgress(nil)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, in, p.serve(ctx)) }()
	in <- dataUnit(topic, 10, "a", "b")
	for deadline := time.Now().Add(30 * time.Second); len(env.consume(t, topic, false)) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("records never reached Kafka")
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if _, calls := p.calls(); len(calls) != 0 {
		t.Errorf("Durable called %d times for a cancelled batch", len(calls))
	}
	if got := env.consume(t, topic, true); len(got) != 0 {
		t.Errorf("read-committed consumer sees %q of a cancelled batch", strs(values(got)))
	}
	if got := gather(t, reg)["tidemark_sink_transaction_aborts_total"]; got != 1 {
		t.Errorf("tidemark_sink_transaction_aborts_total = %v, want 1", got)
	}
}

// scenarioScanRightAfterCommit reads a topic right after each of many commits, as the reconcile
// of a retried snapshot does: with the sink's own end offsets as atLeast, the scan sees every
// committed record even when Kafka has not yet written the commit markers.
func scenarioScanRightAfterCommit(t *testing.T, env *testEnv) {
	ctx := t.Context()
	cfg := env.config(t, ExactlyOnce)
	topic := env.topic("scan")
	s := env.newSink(t, cfg)
	if err := s.EnsureTopics(ctx, []TopicSpec{{Name: topic}}); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	in := make(chan *change.Unit)
	p := newFakeProgress(nil)
	wait := runSink(t, s, in, p)
	total := 0
	for round := range 30 {
		u := &change.Unit{Kind: change.KindTxn, End: change.LSN(10 * (round + 1))}
		for i := range 200 {
			u.Records = append(u.Records, change.Record{Topic: topic, Partition: change.AnyPartition,
				Key: fmt.Appendf(nil, "k%d-%d", round, i), Value: []byte("v")})
		}
		in <- u
		total += len(u.Records)
		p.waitCommittedUnits(t, round+1)
		seen := 0
		if err := s.ScanTopic(ctx, topic, nil, s.EndOffsets(topic), func(*kgo.Record) error { seen++; return nil }); err != nil {
			t.Fatalf("ScanTopic: %v", err)
		}
		if seen != total {
			t.Fatalf("round %d: scan right after the commit saw %d of %d committed records", round, seen, total)
		}
	}
	close(in)
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// scenarioBulkBatchLimit: a batch of stream units alone grows to MaxBatchBytes; one that holds
// snapshot rows stops at MaxBulkBatchBytes.
func scenarioBulkBatchLimit(t *testing.T, env *testEnv) {
	cfg := env.config(t, ExactlyOnce)
	cfg.Linger = 5 * time.Second // only the byte limits close a batch here
	cfg.MaxBatchBytes, cfg.MaxBulkBatchBytes = 64<<10, 16<<10
	topic := env.topic("bulk")
	s := env.newSink(t, cfg)
	if err := s.EnsureTopics(t.Context(), []TopicSpec{{Name: topic}}); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	unit := func(kind change.Kind, i int) *change.Unit {
		return &change.Unit{Kind: kind, End: change.LSN(i + 1), Records: []change.Record{
			{Topic: topic, Partition: change.AnyPartition, Key: fmt.Appendf(nil, "k%d", i), Value: bytes.Repeat([]byte("v"), 2<<10)}}}
	}
	const n = 40
	in := make(chan *change.Unit, 2*n)
	for i := range n {
		in <- unit(change.KindTxn, i)
	}
	for i := range n {
		in <- unit(change.KindSnapshot, n+i)
	}
	close(in)
	p := newFakeProgress(nil)
	if err := runSink(t, s, in, p)(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	_, calls := p.calls()
	var streamMax, bulkMax int
	for _, c := range calls {
		size, bulk := 0, 0
		for _, u := range c.units {
			size += u.Bytes()
			if u.Kind == change.KindSnapshot {
				bulk += u.Bytes()
			}
		}
		if bulk > 0 {
			bulkMax = max(bulkMax, bulk)
		} else {
			streamMax = max(streamMax, size)
		}
	}
	one := unit(change.KindTxn, 0).Bytes()
	if streamMax < cfg.MaxBulkBatchBytes*2 || streamMax >= cfg.MaxBatchBytes+one {
		t.Errorf("largest batch of stream units: %d bytes, want above %d and below %d", streamMax, 2*cfg.MaxBulkBatchBytes, cfg.MaxBatchBytes+one)
	}
	if bulkMax == 0 || bulkMax >= cfg.MaxBulkBatchBytes+one {
		t.Errorf("most snapshot rows in one batch: %d bytes, want below %d", bulkMax, cfg.MaxBulkBatchBytes+one)
	}
}

// readWatermarks collects what ReadWatermarks hands over.
func readWatermarks(ctx context.Context, s *Sink) ([][]byte, error) {
	var out [][]byte
	err := s.ReadWatermarks(ctx, func(_ int32, v []byte) error {
		out = append(out, v)
		return nil
	})
	return out, err
}
