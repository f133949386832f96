package sink

import (
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
