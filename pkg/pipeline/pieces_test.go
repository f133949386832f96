package pipeline

import (
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

// TestLifecyclePieces: a transaction published in pieces across Kafka transactions. Each Kafka
// transaction holding pieces carries a checkpoint naming the durable changes of it, at the
// position before it; no watermark record is written until its last piece is durable (a
// consumer reading up to a watermark never sees part of it), and then the watermark passes it.
func TestLifecyclePieces(t *testing.T) {
	cfg := Config{TopicPrefix: "p", Sink: sink.Config{WatermarkTopic: "p.__watermarks", Delivery: sink.ExactlyOnce}, SnapshotStrategy: snapshot.StrategyChunked}
	// A tiny interval: every call would write a heartbeat for every live export.
	tr := watermark.NewTracker(watermark.Options{Interval: time.Nanosecond})
	lc, _ := startTestOwnerCfg(t, cfg, tr, nil)
	if err := lc.published(t.Context(), fakeCatalog{}, set(exA)); err != nil {
		t.Fatal(err)
	}
	var h history
	// txn is one exactly-once Kafka transaction: Carry, Durable, Committed. It returns the
	// watermark records and the checkpoint written.
	txn := func(units ...*change.Unit) ([]watermark.Record, *watermark.Checkpoint) {
		t.Helper()
		var recs []watermark.Record
		var cp *watermark.Checkpoint
		out := append(lc.Carry(units), lc.Durable(units, nil)...)
		lc.Committed()
		for _, r := range out {
			h.values = append(h.values, r.Value)
			if c, ok, err := watermark.DecodeCheckpoint(r.Value); ok {
				if err != nil {
					t.Fatal(err)
				}
				cp = &c
				continue
			}
			if q, ok, err := watermark.DecodeQuiet(r.Value); ok {
				if err != nil {
					t.Fatal(err)
				}
				// The quiet record is a watermark record too (for every quiet export).
				recs = append(recs, watermark.Record{Export: change.ExportID{Table: watermark.QuietKey}, Watermark: q.Watermark})
				continue
			}
			v, err := watermark.Decode(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, v)
		}
		return recs, cp
	}
	chunk := &change.Unit{Kind: change.KindChunk, Export: exA, Chunk: &change.Chunk{Seq: 0, Read: 1}}
	txn(&change.Unit{Kind: change.KindTxn, Commit: 0x100, End: 0x108}, chunk, &change.Unit{Kind: change.KindHydrated, Export: exA, End: 0x200})
	if recs, _ := txn(&change.Unit{Kind: change.KindProgress, End: 0x200}); len(recs) == 0 {
		t.Fatal("no heartbeat while nothing is partly published; the test shows nothing")
	}

	piece := func(i int, last bool, changes int64, end change.LSN) *change.Unit {
		return &change.Unit{Kind: change.KindTxn, Commit: 0x300, End: end, Piece: &change.Piece{Index: i, Last: last, Changes: changes}}
	}
	for i, n := range []int64{1000, 2000} {
		recs, cp := txn(piece(i, false, n, 0))
		if len(recs) != 0 {
			t.Fatalf("piece %d: watermark records %+v while the transaction is partly published", i, recs)
		}
		if cp == nil || cp.Position != 0x200 || cp.Partial == nil || *cp.Partial != (change.Partial{Commit: 0x300, Changes: n}) {
			t.Fatalf("piece %d: checkpoint %+v, want position 0/200 and partial 0/300 with %d changes", i, cp, n)
		}
		// A tick in between writes nothing either.
		if recs, _ := txn(); len(recs) != 0 {
			t.Fatalf("tick: watermark records %+v while the transaction is partly published", recs)
		}
	}
	// A restart now reads the partial transaction back.
	_, cp, err := watermark.DecodeTopic(h.values)
	if err != nil || cp == nil || cp.Partial == nil || cp.Partial.Changes != 2000 || cp.Position != 0x200 {
		t.Fatalf("restart reads checkpoint %+v, %v; want position 0/200, 2000 changes of 0/300 durable", cp, err)
	}

	recs, cp := txn(piece(2, true, 2500, 0x308), &change.Unit{Kind: change.KindTxn, Commit: 0x400, End: 0x408})
	if cp == nil || cp.Partial != nil || cp.Position != 0x408 {
		t.Fatalf("after the last piece: checkpoint %+v, want position 0/408 and no partial", cp)
	}
	if len(recs) != 1 || recs[0].Watermark == nil || *recs[0].Watermark != 0x408 {
		t.Fatalf("after the last piece: records %+v, want %s at 0/408", recs, exA)
	}
	if _, cp, _ := watermark.DecodeTopic(h.values); cp == nil || cp.Partial != nil {
		t.Fatalf("restart reads checkpoint %+v, want no partial transaction", cp)
	}
}

// TestLifecyclePiecesAtLeastOnce: in at-least-once mode (no Carry) the checkpoint that follows
// acknowledged pieces names the part of the transaction Kafka holds, so a crash repeats at most
// the pieces in flight.
func TestLifecyclePiecesAtLeastOnce(t *testing.T) {
	cfg := Config{TopicPrefix: "p", Sink: sink.Config{WatermarkTopic: "p.__watermarks", Delivery: sink.AtLeastOnce}, SnapshotStrategy: snapshot.StrategyChunked}
	lc, _ := startTestOwnerCfg(t, cfg, nil, nil)
	checkpoint := func(units ...*change.Unit) *watermark.Checkpoint {
		t.Helper()
		var cp *watermark.Checkpoint
		for _, r := range lc.Durable(units, nil) {
			if c, ok, err := watermark.DecodeCheckpoint(r.Value); ok && err == nil {
				cp = &c
			}
		}
		lc.Committed()
		return cp
	}
	if cp := checkpoint(&change.Unit{Kind: change.KindTxn, Commit: 0x100, End: 0x108}); cp == nil || cp.Position != 0x108 {
		t.Fatalf("checkpoint %+v, want 0/108", cp)
	}
	cp := checkpoint(&change.Unit{Kind: change.KindTxn, Commit: 0x200, Piece: &change.Piece{Changes: 700}})
	if cp == nil || cp.Position != 0x108 || cp.Partial == nil || *cp.Partial != (change.Partial{Commit: 0x200, Changes: 700}) {
		t.Fatalf("checkpoint after a piece %+v, want 0/108 with 700 changes of 0/200", cp)
	}
	cp = checkpoint(&change.Unit{Kind: change.KindTxn, Commit: 0x200, End: 0x208, Piece: &change.Piece{Index: 1, Last: true, Changes: 900}})
	if cp == nil || cp.Position != 0x208 || cp.Partial != nil {
		t.Fatalf("checkpoint after the last piece %+v, want 0/208 without partial", cp)
	}
}
