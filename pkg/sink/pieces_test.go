package sink

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// TestPieceStartsBatch (kfake): the first piece of a transaction published in pieces opens a
// Kafka transaction of its own, even while the batch before it could take more (a long linger),
// so that the watermarks written for that batch cover none of the transaction. Later pieces, and
// what follows the last one, batch as usual. Every record is committed once.
func TestPieceStartsBatch(t *testing.T) {
	env := newFakeEnv(t)
	topic := env.topic("data")
	cfg := env.config(t, ExactlyOnce)
	cfg.Linger = 2 * time.Second
	s := env.newSink(t, cfg)
	if err := s.EnsureTopics(t.Context(), []TopicSpec{{Name: topic}}); err != nil {
		t.Fatal(err)
	}
	piece := func(u *change.Unit, i int, last bool) *change.Unit {
		u.Piece = &change.Piece{Index: i, Last: last, Changes: int64(i + 1)}
		if !last {
			u.End = 0
		}
		return u
	}
	units := []*change.Unit{
		dataUnit(topic, 0x100, "a"),
		piece(dataUnit(topic, 0x200, "b", "c"), 0, false),
		piece(dataUnit(topic, 0x200, "d"), 1, false),
		piece(dataUnit(topic, 0x200, "e"), 2, true),
		dataUnit(topic, 0x300, "f"),
	}
	in := make(chan *change.Unit, len(units))
	for _, u := range units {
		in <- u
	}
	close(in)
	p := newFakeProgress(nil)
	if err := runSink(t, s, in, p)(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	_, calls := p.calls()
	var batches [][]*change.Unit
	for _, c := range calls {
		if len(c.units) > 0 {
			batches = append(batches, c.units)
		}
	}
	if len(batches) != 2 || len(batches[0]) != 1 || batches[0][0] != units[0] || len(batches[1]) != 4 || batches[1][0] != units[1] {
		t.Fatalf("batches %v, want [a] and [pieces 0, 1, 2, f]", batches)
	}
	if got := env.consume(t, topic, true); len(got) != 6 {
		t.Fatalf("%d records committed, want 6", len(got))
	}
}

// TestClaimsReturnedWhenDurable (kfake): the sink gives a unit's claim back to its stage's budget
// once the unit is durable, before it reports the unit durable, and not before.
func TestClaimsReturnedWhenDurable(t *testing.T) {
	env := newFakeEnv(t)
	topic := env.topic("data")
	s := env.newSink(t, env.config(t, ExactlyOnce))
	if err := s.EnsureTopics(t.Context(), []TopicSpec{{Name: topic}}); err != nil {
		t.Fatal(err)
	}
	budget := change.NewBudget(100)
	units := []*change.Unit{dataUnit(topic, 0x100, "a"), dataUnit(topic, 0x200, "b"), dataUnit(topic, 0x300, "c")}
	for _, u := range units {
		u.Claim = budget.Take(10)
	}
	in := make(chan *change.Unit, len(units))
	seen := 0
	p := newFakeProgress(func(_ int, durable []*change.Unit) []change.Record {
		seen += len(durable)
		if got, want := budget.InUse(), int64(10*(len(units)-seen)); got != want {
			t.Errorf("after %d durable units: %d in use, want %d", seen, got, want)
		}
		return nil
	})
	for _, u := range units {
		in <- u
	}
	close(in)
	if err := runSink(t, s, in, p)(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if seen != len(units) || budget.InUse() != 0 {
		t.Fatalf("%d units durable, %d in use; want %d and 0", seen, budget.InUse(), len(units))
	}
}

// TestScanKeys (kfake): the keys alive before the cut (tombstones and truncates kill them) and
// the keys with a value after it.
func TestScanKeys(t *testing.T) {
	env := newFakeEnv(t)
	topic := env.topic("keys")
	s := env.newSink(t, env.config(t, ExactlyOnce))
	if err := s.EnsureTopics(t.Context(), []TopicSpec{{Name: topic}}); err != nil {
		t.Fatal(err)
	}
	op := func(v string) []change.Header { return []change.Header{{Key: "op", Value: []byte(v)}} }
	rec := func(key, value string, h []change.Header) change.Record {
		r := change.Record{Topic: topic, Partition: 0, Headers: h}
		if key != "" {
			r.Key = []byte(key)
		}
		if value != "" {
			r.Value = []byte(value)
		}
		return r
	}
	run := func(units ...*change.Unit) {
		t.Helper()
		in := make(chan *change.Unit, len(units))
		for _, u := range units {
			in <- u
		}
		close(in)
		if err := runSink(t, s, in, newFakeProgress(nil))(); err != nil {
			t.Fatal(err)
		}
	}
	run(&change.Unit{Kind: change.KindTxn, End: 1, Records: []change.Record{rec("gone", "v", op("c")), rec("kept", "v", op("c"))}},
		&change.Unit{Kind: change.KindTxn, End: 2, Records: []change.Record{rec("", "t", op("t")), rec("late", "v", op("c")), rec("dead", "v", op("c")), rec("dead", "", nil)}})
	cut := s.EndOffsets(topic)
	run(&change.Unit{Kind: change.KindSnapshot, Records: []change.Record{rec("late", "v", op("r")), rec("new", "v", op("r")), rec("gone2", "", nil)}})
	k, err := s.ScanKeys(t.Context(), topic, nil, cut, s.EndOffsets(topic), change.Header{Key: "op", Value: []byte("t")})
	if err != nil {
		t.Fatal(err)
	}
	before, after := slices.Sorted(maps.Keys(k.Before)), slices.Sorted(maps.Keys(k.After))
	if !slices.Equal(before, []string{"late"}) || !slices.Equal(after, []string{"late", "new"}) {
		t.Fatalf("before the cut %v, after %v; want [late] and [late new]", before, after)
	}
}
