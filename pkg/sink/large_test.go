package sink

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
)

// largestValue is the largest record value the pipeline hands the sink: the encoder refuses
// larger ones (pkg/pipeline sets codec's MaxRecordBytes to this).
const largestValue = MaxRecordBytes - 64<<10

// largeUnit is a transaction unit of one record for topic with key and a value of n bytes,
// starting with name.
func largeUnit(topic string, end change.LSN, key, name string, n int) *change.Unit {
	u := dataUnit(topic, end, key)
	v := append([]byte(name+":"), bytes.Repeat([]byte("v"), n-len(name)-1)...)
	u.Records[0].Value = v
	return u
}

// scenarioLargeRecords sends small units with records just under the largest the pipeline
// makes between them, all to one key, quickly enough to share batches: the main producer's
// record batches are far smaller than those records, so the sink must produce them through the
// large producer. Every record arrives, in order, with its value intact, and every unit is
// reported durable in order.
func scenarioLargeRecords(t *testing.T, env *testEnv, d Delivery) {
	ctx := t.Context()
	cfg := env.config(t, d)
	s := env.newSink(t, cfg)
	topic := env.topic("data")
	if err := s.EnsureTopics(ctx, []TopicSpec{{Name: topic}}); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	units := []*change.Unit{
		dataUnit(topic, 10, "k"),
		largeUnit(topic, 11, "k", "big1", largestValue),
		dataUnit(topic, 12, "k"),
		largeUnit(topic, 13, "k", "big2", 2<<20),
		largeUnit(topic, 14, "k", "big3", largestValue),
		dataUnit(topic, 15, "k"),
	}
	// big2 is one byte above the largest record the main producer takes.
	r := &units[3].Records[0]
	r.Value = r.Value[:largeRecordBytes+1-(r.Size()-len(r.Value))]
	p := newFakeProgress(nil)
	in := make(chan *change.Unit, len(units))
	wait := runSink(t, s, in, p)
	for _, u := range units {
		in <- u
	}
	close(in)
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	var want, got []string
	for _, u := range units {
		want = append(want, summary(u.Records[0].Value))
	}
	for _, r := range env.consume(t, topic, d == ExactlyOnce) {
		got = append(got, summary(r.Value))
	}
	if !slices.Equal(got, want) {
		t.Errorf("records = %q, want %q", got, want)
	}
	var ends []change.LSN
	_, calls := p.calls()
	for _, c := range calls {
		for _, u := range c.units {
			ends = append(ends, u.End)
		}
	}
	if want := []change.LSN{10, 11, 12, 13, 14, 15}; !slices.Equal(ends, want) {
		t.Errorf("durable units end at %v, want %v", ends, want)
	}
}

// summary names a value by its prefix and length.
func summary(v []byte) string {
	name, _, _ := strings.Cut(string(v[:min(len(v), 16)]), ":")
	return fmt.Sprintf("%s/%d", name, len(v))
}

// scenarioFencedLarge: a second instance fences the large producer's transactional id too, so
// that a batch of large records of the first instance fails with ErrFenced and commits nothing.
func scenarioFencedLarge(t *testing.T, env *testEnv) {
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
	in <- largeUnit(topic, 10, "a", "big1", 2<<20)
	p.waitCommittedUnits(t, 1)

	if err := env.newSink(t, cfg).Init(ctx); err != nil {
		t.Fatalf("second Init: %v", err)
	}
	in <- largeUnit(topic, 11, "b", "big2", 2<<20)
	close(in)
	err := wait()
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("Run of the fenced sink = %v, want an ErrFenced error", err)
	}
	var got []string
	for _, r := range env.consume(t, topic, true) {
		got = append(got, summary(r.Value))
	}
	if want := []string{"big1/2097152"}; !slices.Equal(got, want) {
		t.Errorf("committed records = %q, want only the first unit's %q", got, want)
	}
}
