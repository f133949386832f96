package sink

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
)

// epochProducer is a producer whose epoch moves (or not) at each commit, and which records
// what it was told to forget.
type epochProducer struct {
	bump     bool
	bumpOnce bool
	commits  int
	epoch    int16
	purged   [][]string
	inTxn    bool
	offsets  map[string]int64
}

func (p *epochProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	if p.offsets == nil {
		p.offsets = make(map[string]int64)
	}
	r.Offset = p.offsets[r.Topic] // as Kafka does: the next offset of its partition
	p.offsets[r.Topic]++
	promise(r, nil)
}
func (p *epochProducer) Flush(context.Context) error { return nil }
func (p *epochProducer) BeginTransaction() error     { p.inTxn = true; return nil }
func (p *epochProducer) EndTransaction(context.Context, kgo.TransactionEndTry) error {
	p.inTxn = false
	p.commits++
	if p.bump || p.bumpOnce && (p.commits == 4 || p.commits == 7) {
		p.epoch++
	}
	return nil
}
func (p *epochProducer) AbortBufferedRecords(context.Context) error { return nil }
func (p *epochProducer) ProducerID(context.Context) (int64, int16, error) {
	return 7, p.epoch, nil
}
func (p *epochProducer) PurgeTopicsFromProducing(topics ...string) {
	if p.inTxn {
		panic("purge inside a transaction")
	}
	p.purged = append(p.purged, slices.Sorted(slices.Values(topics)))
}

// TestPurgeIdleTopicsPolicy: the main producer forgets the topics not written for the purge
// interval, between transactions, only when every commit bumps the producer epoch
// (transaction version 2) and only in exactly-once mode; never the watermark topic, never a
// topic written since the last look.
func TestPurgeIdleTopicsPolicy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bump     bool
		delivery Delivery
		want     bool
	}{
		{"transaction version 2", true, ExactlyOnce, true},
		{"epoch kept across commits (transaction version 1)", false, ExactlyOnce, false},
		{"epoch bumped now and then (producer ids reloaded)", false, ExactlyOnce, false},
		{"at least once", true, AtLeastOnce, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newFakeEnv(t)
			cfg := env.config(t, tc.delivery)
			s := env.newSink(t, cfg)
			fp := &epochProducer{bump: tc.bump}
			if strings.HasPrefix(tc.name, "epoch bumped now and then") {
				fp.bumpOnce = true // two commits bump it, apart (the 4th and the 7th, when c is idle)
			}
			s.prod = fp
			var clock time.Time
			s.purge.every, s.purge.now = time.Hour, func() time.Time { return clock }
			p := newFakeProgress(nil)
			ctx := t.Context()
			acks := p.serve(ctx)
			topics := []string{"a", "b", "c", cfg.WatermarkTopic}
			batch := func(now time.Time, touch ...string) {
				t.Helper()
				u := &change.Unit{Kind: change.KindTxn, End: 1}
				for _, tp := range touch {
					u.Records = append(u.Records, change.Record{Topic: tp, Partition: 0, Value: []byte("v")})
				}
				clock = now
				if _, err := s.runBatch(ctx, u, make(chan *change.Unit), time.NewTimer(time.Hour), acks); err != nil {
					t.Fatal(err)
				}
			}
			t0 := time.Now()
			// A look counts a topic written in the batch it follows as written.
			batch(t0, topics...)                        // no look: the first epoch seen
			batch(t0.Add(time.Minute), topics...)       // no look: one bump seen
			batch(t0.Add(2*time.Minute), topics...)     // no look: two bumps seen
			batch(t0.Add(2*time.Hour), topics...)       // first look (three bumps in a row): all live
			batch(t0.Add(2*time.Hour+time.Minute), "a") // no look: too soon after the last
			batch(t0.Add(5*time.Hour), "a", "b")        // look: c idle since the first look
			batch(t0.Add(7*time.Hour), "a")             // look: b idle since the last look
			batch(t0.Add(9*time.Hour), "a", "c")        // look: nothing idle; c known again
			var got [][]string
			for _, g := range fp.purged {
				got = append(got, g)
			}
			if !tc.want {
				if len(got) != 0 {
					t.Fatalf("forgot %v, want nothing", got)
				}
				return
			}
			want := [][]string{{"c"}, {"b"}}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("forgot %v, want %v (c once idle, b once idle, never a or the watermark topic)", got, want)
			}
			if s.purge.live["b"] || !s.purge.live["c"] || !s.purge.live["a"] {
				t.Fatalf("live topics %v: want a and c (written again), not b", s.purge.live)
			}
		})
	}
}

// TestPurgedTopicsProducedAgain: on a real broker, whose transactions bump the producer epoch
// at every commit (transaction version 2, Kafka 4's default), topics the producer forgot are
// produced to again, in later transactions, without a sequence error, and every record is
// in its topic once, in order, read committed.
func TestPurgedTopicsProducedAgain(t *testing.T) {
	env := newRealEnv(t)
	cfg := env.config(t, ExactlyOnce)
	cfg.Partitions = 2
	s := env.newSink(t, cfg)
	s.purge.every = 200 * time.Millisecond
	ctx := t.Context()
	const n = 12
	topics := make([]string, n)
	specs := make([]TopicSpec, n)
	for i := range topics {
		topics[i] = env.topic(fmt.Sprintf("p%02d", i))
		specs[i] = TopicSpec{Name: topics[i]}
	}
	if err := s.EnsureTopics(ctx, specs); err != nil {
		t.Fatal(err)
	}
	s.AwaitLeaders(ctx, topics)
	p := newFakeProgress(nil)
	in := make(chan *change.Unit)
	wait := runSink(t, s, in, p)
	var sent []*change.Unit
	lsn := change.LSN(100)
	send := func(touch []string) {
		t.Helper()
		for _, tp := range touch {
			lsn++
			u := dataUnit(tp, lsn, fmt.Sprintf("k%d", lsn%5), fmt.Sprintf("k%d", (lsn+1)%5))
			sent = append(sent, u)
			in <- u
		}
		p.waitCommittedUnits(t, len(sent))
	}
	// Every topic is written, then for a while only the first: the others are forgotten.
	send(topics)
	deadline := time.Now().Add(20 * time.Second)
	for s.purgeForgotten() < n-1 {
		if time.Now().After(deadline) {
			t.Fatalf("forgot %d topics, want %d (epoch bumps in a row: %d)", s.purgeForgotten(), n-1, s.purgeBumps())
		}
		send(topics[:1])
		time.Sleep(50 * time.Millisecond)
	}
	// Written again after being forgotten, in several transactions, twice over.
	for range 2 {
		send(topics)
		send(topics[n/2:])
		time.Sleep(300 * time.Millisecond)
		send(topics[:1])
	}
	close(in)
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := map[string][]string{}
	for _, u := range sent {
		for _, r := range u.Records {
			want[r.Topic] = append(want[r.Topic], string(r.Value))
		}
	}
	for _, tp := range topics {
		byPart := map[int32][]string{}
		var got []string
		for _, r := range env.consume(t, tp, true) {
			got = append(got, string(r.Value))
			byPart[r.Partition] = append(byPart[r.Partition], string(r.Value))
		}
		slices.Sort(got)
		w := slices.Sorted(slices.Values(want[tp]))
		if !slices.Equal(got, w) {
			t.Fatalf("topic %s holds %d records %v, want the %d sent once each %v", tp, len(got), got, len(w), w)
		}
		// Per partition, in the order sent.
		for part, vals := range byPart {
			idx := func(v string) int { return slices.Index(want[tp], v) }
			for i := 1; i < len(vals); i++ {
				if idx(vals[i]) < idx(vals[i-1]) {
					t.Fatalf("topic %s partition %d: %s before %s, sent in the other order", tp, part, vals[i-1], vals[i])
				}
			}
		}
	}
	t.Logf("forgot %d topics in all; %d records in %d topics read back once each", s.purgeForgotten(), len(sent)*2, n)
}
