package pipeline

import (
	"context"
	"errors"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/snapshot"
)

// hydrate copies e (new to the publication) to hydrated with strategy's path, recording the
// durable records in h.
func hydrate(t *testing.T, lc *loop, h *history, e change.ExportID, chunked bool) {
	t.Helper()
	ctx := t.Context()
	if err := lc.published(ctx, fakeCatalog{}, set(e)); err != nil {
		t.Fatal(err)
	}
	if chunked {
		h.durable(lc, &change.Unit{Kind: change.KindChunk, Export: e, Chunk: &change.Chunk{Read: 3}},
			&change.Unit{Kind: change.KindHydrated, Export: e, End: 0x200})
	} else {
		lc.request()
		if _, err := lc.Begin(ctx, 0x100, []snapshot.TableInfo{{Table: &change.Table{Export: e}}}); err != nil {
			t.Fatal(err)
		}
		h.durable(lc, &change.Unit{Kind: change.KindSnapshot, Export: e, Rows: 3},
			&change.Unit{Kind: change.KindSnapshotDone, Export: e})
		h.durable(lc, &change.Unit{Kind: change.KindHydrated, Export: e, End: 0x200})
	}
	wantPhase(t, lc, e, phaseHydrated)
}

// answered returns the answer on c, if there is one yet.
func answered(c <-chan error) (bool, error) {
	select {
	case err := <-c:
		return true, err
	default:
		return false, nil
	}
}

// TestRecopyAnsweredWhenDurable: a re-copy on demand is answered once the record announcing it
// is committed, not before; a new life that reads the records back copies the table again.
func TestRecopyAnsweredWhenDurable(t *testing.T) {
	tests := []struct {
		name     string
		strategy snapshot.Strategy
		e        change.ExportID
		chunked  bool
		// restart is what the new life does with e: at start-up (resume) and at its first poll.
		resume, poll []string
	}{
		{
			name: "chunked", strategy: snapshot.StrategyChunked, e: exA, chunked: true,
			resume: []string{"resume-chunking public.a 0/300", "topic p.public.a compact=true", "chunk-job public.a attempt 2 after []"},
		},
		{
			name: "copy", strategy: snapshot.StrategyCopy, e: exA,
			poll: []string{"detect [public.a]"},
		},
		{
			name: "keyless", strategy: snapshot.StrategyChunked, e: exKeyless,
			poll: []string{"detect [public.keyless]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			lc, rec := startTestOwner(t, tt.strategy, nil)
			var h history
			hydrate(t, lc, &h, tt.e, tt.chunked)
			rec.take()

			durable, err := lc.resnapshotWait(tt.e)
			if err != nil {
				t.Fatal(err)
			}
			// A batch before the poll started the copy: nothing announces it yet.
			h.durable(lc, &change.Unit{Kind: change.KindProgress, End: 0x300})
			if ok, err := answered(durable); ok {
				t.Fatalf("answered (%v) before the copy started", err)
			}
			if err := lc.published(ctx, fakeCatalog{}, set(tt.e)); err != nil {
				t.Fatal(err)
			}
			if p := lc.phase(tt.e); p == phaseHydrated {
				t.Fatalf("%s is still hydrated after the poll", tt.e)
			}
			// The record is in a batch that did not commit (a crash now loses it).
			recs := lc.Durable(nil, nil)
			if len(recs) == 0 {
				t.Fatal("no record announces the re-copy")
			}
			if ok, err := answered(durable); ok {
				t.Fatalf("answered (%v) before the record was committed", err)
			}
			lc.Committed()
			for _, r := range recs {
				h.values = append(h.values, r.Value)
			}
			if ok, err := answered(durable); !ok || err != nil {
				t.Fatalf("after the commit: answered %v, %v; want nil", ok, err)
			}

			// The crash, right after the answer: the new life copies the table again.
			lc2, rec2 := startTestOwner(t, tt.strategy, h.values)
			if err := lc2.resume(ctx, fakeCatalog{}, set(tt.e), 0x300); err != nil {
				t.Fatal(err)
			}
			wantCalls(t, rec2, tt.resume...)
			if err := lc2.published(ctx, fakeCatalog{}, set(tt.e)); err != nil {
				t.Fatal(err)
			}
			wantCalls(t, rec2, tt.poll...)
			if p := lc2.phase(tt.e); p == phaseHydrated {
				t.Fatalf("%s is hydrated after the restart: the re-copy was lost", tt.e)
			}
		})
	}
}

// failingCatalog cannot read the server's WAL position.
type failingCatalog struct{ fakeCatalog }

func (failingCatalog) CurrentWAL(context.Context) (change.LSN, error) {
	return 0, errors.New("connection lost")
}

// TestRecopyNotStarted: a re-copy whose table leaves the publication before the poll is
// answered with ErrNotStarted; one whose poll fails waits for the next poll.
func TestRecopyNotStarted(t *testing.T) {
	ctx := t.Context()
	lc, _ := startTestOwner(t, snapshot.StrategyChunked, nil)
	var h history
	hydrate(t, lc, &h, exA, true)
	if err := lc.published(ctx, fakeCatalog{}, set(exA, exB)); err != nil {
		t.Fatal(err)
	}

	// The poll fails (b left, and the WAL position cannot be read): a waits for the next one.
	durable, err := lc.resnapshotWait(exA)
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.published(ctx, failingCatalog{}, set(exA)); err == nil {
		t.Fatal("the poll did not fail")
	}
	if ok, err := answered(durable); ok {
		t.Fatalf("answered (%v) after a failed poll", err)
	}
	wantPhase(t, lc, exA, phaseHydrated)
	if err := lc.published(ctx, fakeCatalog{}, set(exA)); err != nil {
		t.Fatal(err)
	}
	wantPhase(t, lc, exA, phaseChunking)
	commitAnswers(t, lc, durable)

	// Left the publication before the poll: answered, not copied.
	h.durable(lc, &change.Unit{Kind: change.KindChunk, Export: exA, Chunk: &change.Chunk{Read: 3}},
		&change.Unit{Kind: change.KindHydrated, Export: exA, End: 0x400})
	wantPhase(t, lc, exA, phaseHydrated)
	durable, err = lc.resnapshotWait(exA)
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.published(ctx, fakeCatalog{wal: 0x500}, set()); err != nil {
		t.Fatal(err)
	}
	if ok, err := answered(durable); !ok || !errors.Is(err, ErrNotStarted) {
		t.Fatalf("answered %v, %v; want ErrNotStarted", ok, err)
	}
}

// commitAnswers commits a batch and checks that it answers the re-copy waiting on c.
func commitAnswers(t *testing.T, lc *loop, c <-chan error) {
	t.Helper()
	lc.Durable(nil, nil)
	lc.Committed()
	if ok, err := answered(c); !ok || err != nil {
		t.Fatalf("after the commit: answered %v, %v; want nil", ok, err)
	}
}
