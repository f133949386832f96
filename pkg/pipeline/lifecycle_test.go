package pipeline

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

func TestLifecycleChunked(t *testing.T) {
	ctx := t.Context()
	lc, rec := startTestOwner(t, snapshot.StrategyChunked, nil)
	if err := lc.published(ctx, fakeCatalog{}, set(exA)); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec, "topic p.public.a compact=true", "start-chunking public.a", "chunk-job public.a attempt 1 after []")
	wantPhase(t, lc, exA, phaseChunking)
	// A second poll changes nothing.
	if err := lc.published(ctx, fakeCatalog{}, set(exA)); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec)

	chunk := &change.Unit{Kind: change.KindChunk, Export: exA, Chunk: &change.Chunk{Seq: 0, Range: change.KeyRange{To: []string{"9"}}, Read: 5}}
	recs := durable(lc, &change.Unit{Kind: change.KindProgress, End: 0x100}, chunk)
	if r := recs[exA]; r.State != watermark.StateHydrating || r.Snapshot.ChunksDone != 1 {
		t.Fatalf("record after a chunk: %+v", r)
	}
	last := &change.Unit{Kind: change.KindChunk, Export: exA, Chunk: &change.Chunk{Seq: 1, Range: change.KeyRange{From: []string{"9"}}, Read: 3}}
	recs = durable(lc, last, &change.Unit{Kind: change.KindHydrated, Export: exA, End: 0x200})
	if r := recs[exA]; r.State != watermark.StateHydrated || r.Watermark == nil || *r.Watermark != 0x200 {
		t.Fatalf("record after the last chunk: %+v", r)
	}
	wantPhase(t, lc, exA, phaseHydrated)
	wantCalls(t, rec)
	// What GET /exports reads without waiting for the loop: published after the commit.
	if v := lc.o.exports(); len(v) != 1 || v[0].State != watermark.StateHydrated || v[0].Phase != "hydrated" || *v[0].Watermark != 0x200 {
		t.Fatalf("published view %+v, want a hydrated at 0/200", v)
	}

	// A re-copy on demand: chunked again, attempt 2; refused while it runs.
	if err := lc.resnapshot(exA); err != nil {
		t.Fatal(err)
	}
	if err := lc.published(ctx, fakeCatalog{}, set(exA)); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec, "topic p.public.a compact=true", "start-chunking public.a", "chunk-job public.a attempt 2 after []")
	if err := lc.resnapshot(exA); err == nil {
		t.Fatal("a re-copy of a table being copied was accepted")
	}
	if err := lc.resnapshot(exB); err == nil {
		t.Fatal("a re-copy of an unknown table was accepted")
	}
}

func TestLifecycleCopy(t *testing.T) {
	ctx := t.Context()
	lc, rec := startTestOwner(t, snapshot.StrategyChunked, nil)
	// Keyless: the copy strategy whatever the setting.
	if err := lc.published(ctx, fakeCatalog{}, set(exKeyless)); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec, "detect [public.keyless]")
	wantPhase(t, lc, exKeyless, phaseHolding)
	if req := lc.request(); !slices.Equal(req.Exports, []change.ExportID{exKeyless}) {
		t.Fatalf("request %v", req)
	}
	info := []snapshot.TableInfo{{Table: &change.Table{Export: exKeyless}, EstimatedRows: 10}}
	attempts, err := lc.Begin(ctx, 0x300, info)
	if err != nil || attempts[exKeyless] != 1 {
		t.Fatalf("Begin = %v, %v", attempts, err)
	}
	wantCalls(t, rec, "topic p.public.keyless compact=false", "consistent-point [public.keyless] 0/300")
	wantPhase(t, lc, exKeyless, phaseCopying)

	// Rewritten during the copy: held again, copied at the next poll.
	lc.Restart(exKeyless, "rewritten")
	wantCalls(t, rec, "restart public.keyless")
	wantPhase(t, lc, exKeyless, phaseHolding)
	if err := lc.published(ctx, fakeCatalog{}, set(exKeyless)); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec, "detect [public.keyless]")
	lc.request()
	if _, err := lc.Begin(ctx, 0x400, info); err != nil {
		t.Fatal(err)
	}
	rec.take()

	// The copy is durable (nothing to reconcile: a new table): the held changes are released.
	durable(lc, &change.Unit{Kind: change.KindSnapshot, Export: exKeyless, Rows: 10},
		&change.Unit{Kind: change.KindSnapshotDone, Export: exKeyless})
	wantCalls(t, rec, "copy-done public.keyless")
	wantPhase(t, lc, exKeyless, phaseReleasing)
	durable(lc, &change.Unit{Kind: change.KindHydrated, Export: exKeyless, End: 0x500})
	wantPhase(t, lc, exKeyless, phaseHydrated)
}

func TestLifecycleRemoveFailAndReAdd(t *testing.T) {
	ctx := t.Context()
	lc, rec := startTestOwner(t, snapshot.StrategyChunked, nil)
	if err := lc.published(ctx, fakeCatalog{}, set(exA, exB)); err != nil {
		t.Fatal(err)
	}
	rec.take()
	// b fails: stopped for good, not copied again by later polls.
	lc.Failed(exB, fmt.Errorf("boom"))
	wantCalls(t, rec, "fail public.b", "chunk-stop public.b")
	wantPhase(t, lc, exB, phaseFailed)
	// a leaves the publication while it is being copied.
	if err := lc.published(ctx, fakeCatalog{wal: 0x900}, set(exB)); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec, "chunk-stop public.a", "remove public.a 0/900")
	wantPhase(t, lc, exA, phaseRemoving) // being copied: its records say hydrating until the removal passed
	durable(lc, &change.Unit{Kind: change.KindRemoved, Export: exA, End: 0x900})
	wantPhase(t, lc, exA, phaseRemoved)
	// Added again: its topic holds rows of its earlier life, so it takes a copy, which
	// reconciles.
	if err := lc.published(ctx, fakeCatalog{}, set(exA, exB)); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec, "detect [public.a]")
	wantPhase(t, lc, exA, phaseHolding)
}

// TestLifecycleRestartInEachPhase crashes the pipeline with an export in each phase and starts
// a new lifecycle from the records that were durable: hydrated exports resume at their
// position, a chunked copy goes on after its last durable chunk, a copy that never finished is
// copied again (with a copy, which reconciles), a removed one stays removed.
func TestLifecycleRestartInEachPhase(t *testing.T) {
	ctx := t.Context()
	exH := change.ExportID{Schema: "public", Table: "hydrated"}
	exC := change.ExportID{Schema: "public", Table: "chunking"}
	exCopy := change.ExportID{Schema: "public", Table: "keyless_copying"}
	exHold := change.ExportID{Schema: "public", Table: "keyless_holding"}
	exRel := change.ExportID{Schema: "public", Table: "keyless_releasing"}
	exR := change.ExportID{Schema: "public", Table: "removed"}
	exF := change.ExportID{Schema: "public", Table: "failed"}
	// Left the publication, the stream not past the removal yet: hydrated, and being copied.
	exRmH := change.ExportID{Schema: "public", Table: "removing_hydrated"}
	exRmC := change.ExportID{Schema: "public", Table: "removing_chunking"}
	exRmF := change.ExportID{Schema: "public", Table: "removing_failed"}
	all := []change.ExportID{exH, exC, exCopy, exHold, exRel, exR, exF, exRmH, exRmC, exRmF}

	lc, rec := startTestOwner(t, snapshot.StrategyChunked, nil)
	var h history
	if err := lc.published(ctx, fakeCatalog{}, set(all...)); err != nil {
		t.Fatal(err)
	}
	lc.request()
	var infos []snapshot.TableInfo
	for _, e := range []change.ExportID{exCopy, exRel} {
		infos = append(infos, snapshot.TableInfo{Table: &change.Table{Export: e}})
	}
	if _, err := lc.Begin(ctx, 0x100, infos); err != nil {
		t.Fatal(err)
	}
	h.durable(lc, &change.Unit{Kind: change.KindProgress, End: 0x100})
	h.durable(lc, &change.Unit{Kind: change.KindChunk, Export: exH, Chunk: &change.Chunk{Read: 1}},
		&change.Unit{Kind: change.KindHydrated, Export: exH, End: 0x150},
		&change.Unit{Kind: change.KindChunk, Export: exC, Chunk: &change.Chunk{Read: 7, Range: change.KeyRange{To: []string{"42"}}}},
		&change.Unit{Kind: change.KindChunk, Export: exR, Chunk: &change.Chunk{Read: 1}},
		&change.Unit{Kind: change.KindHydrated, Export: exR, End: 0x150},
		&change.Unit{Kind: change.KindChunk, Export: exRmH, Chunk: &change.Chunk{Read: 1}},
		&change.Unit{Kind: change.KindHydrated, Export: exRmH, End: 0x150},
		&change.Unit{Kind: change.KindSnapshotDone, Export: exRel})
	lc.Failed(exF, fmt.Errorf("boom"))
	lc.Failed(exRmF, fmt.Errorf("boom"))
	if err := lc.published(ctx, fakeCatalog{wal: 0x180}, set(exH, exC, exCopy, exHold, exRel, exF)); err != nil {
		t.Fatal(err)
	}
	h.durable(lc, &change.Unit{Kind: change.KindRemoved, Export: exR, End: 0x180}, &change.Unit{Kind: change.KindProgress, End: 0x200})
	for e, want := range map[change.ExportID]phase{exH: phaseHydrated, exC: phaseChunking, exCopy: phaseCopying,
		exHold: phaseHolding, exRel: phaseReleasing, exR: phaseRemoved, exF: phaseFailed,
		exRmH: phaseRemovingHydrated, exRmC: phaseRemoving, exRmF: phaseRemovingFailed} {
		wantPhase(t, lc, e, want)
	}
	rec.take()

	// The crash; a new life reads the records back.
	lc2, rec2 := startTestOwner(t, snapshot.StrategyChunked, h.values)
	published := set(exH, exC, exCopy, exHold, exRel, exF)
	if err := lc2.resume(ctx, fakeCatalog{}, published, 0x200); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec2,
		"resume-chunking public.chunking 0/200",
		"topic p.public.chunking compact=true",
		"topic p.public.hydrated compact=true",
		"resume public.hydrated 0/200",
		"chunk-job public.chunking attempt 1 after [42]")
	// The first poll copies every other published table again, with a copy: their topics may
	// hold rows of the unfinished attempt (or of the failed export's chunks) to reconcile.
	if err := lc2.published(ctx, fakeCatalog{}, published); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec2, "detect [public.failed public.keyless_copying public.keyless_holding public.keyless_releasing]")
	req := lc2.request()
	if len(req.Exports) != 4 {
		t.Fatalf("request %v", req.Exports)
	}
	wantPhase(t, lc2, exR, 0)
	wantPhase(t, lc2, exRmF, 0) // failed, and no longer published: nothing to take up
	wantPhase(t, lc2, exH, phaseHydrated)
	// Removed while stopped, as far as the new life knows: final records, no routes.
	wantPhase(t, lc2, exRmH, phaseRemoved)
	wantPhase(t, lc2, exRmC, phaseRemoved)
	for _, s := range lc2.states() {
		if (s.Export == exRmH || s.Export == exRmC) && (s.State != watermark.StateRemoved || s.Phase != "removed") {
			t.Errorf("%s after the restart: %+v, want removed", s.Export, s)
		}
	}
	// What the slot may confirm: the restored checkpoint's position, or more.
	if got := rec2.lastConfirmed(); got < 0x200 {
		t.Errorf("the new life lets the slot confirm %s, want 0/200 or more", got)
	}
}

// TestPartitionsChanged: a published partitioned root whose leaf partitions change is copied
// again, with the copy strategy (which reconciles), once it is hydrated.
func TestPartitionsChanged(t *testing.T) {
	lc, _ := newTestOwner(t, Config{SnapshotStrategy: snapshot.StrategyChunked}, nil, nil)
	lc.phases[exA] = phaseHydrated
	lc.phases[exB] = phaseChunking
	lc.partitions(map[change.ExportID]string{exA: "1,2", exB: "5"})
	if len(lc.pending) != 0 {
		t.Fatalf("first sight of the partitions: pending %v, want none", lc.pending)
	}
	lc.partitions(map[change.ExportID]string{exA: "1,2", exB: "5"})
	if len(lc.pending) != 0 {
		t.Fatalf("unchanged partitions: pending %v, want none", lc.pending)
	}
	// b is being copied: looked at again once hydrated.
	lc.partitions(map[change.ExportID]string{exA: "1,2,3", exB: "5,6"})
	if !slices.Equal(lc.pending, []change.ExportID{exA}) || !lc.reconcileNext[exA] || lc.reconcileNext[exB] {
		t.Fatalf("after a partition was attached: pending %v, reconcile %v; want a alone", lc.pending, lc.reconcileNext)
	}
	lc.phases[exB] = phaseHydrated
	lc.partitions(map[change.ExportID]string{exA: "1,2,3", exB: "5,6"})
	if !slices.Equal(lc.pending, []change.ExportID{exA, exB}) {
		t.Fatalf("b hydrated: pending %v, want a and b", lc.pending)
	}
	reply := make(chan pollReply, 1)
	r := &pollRound{ev: evPolled{reply: reply}, added: []change.ExportID{exA}, phases: map[change.ExportID]phase{exA: phaseHydrated}}
	lc.round = r
	lc.loaded(evLoaded{tables: map[change.ExportID]*change.Table{exA: {Export: exA, Columns: []change.Column{{Name: "id", Key: true}}}}, reply: reply})
	if !slices.Equal(r.started, []change.ExportID{exA}) || lc.phases[exA] != phaseHolding || len(lc.topicQ) != 0 {
		t.Fatalf("started %v, phase %v, topic jobs %d; want a copied with the copy strategy", r.started, lc.phases[exA], len(lc.topicQ))
	}
	if lc.reconcileNext[exA] {
		t.Fatalf("reconcileNext of a kept after its copy started")
	}
}

// TestOwnerNeverWaitsForReplication: while the replication stage has not applied Detect or
// SetConsistentPoint (it is reconnecting, or busy), the owner goes on answering the sink; the
// snapshot is requested once the changes are held, and Begin is answered once the consistent
// point is set.
func TestOwnerNeverWaitsForReplication(t *testing.T) {
	ctx := t.Context()
	lc, rec := startTestOwner(t, snapshot.StrategyCopy, nil)
	rec.detected, rec.pointSet = make(chan struct{}), make(chan error, 1)
	if err := lc.published(ctx, fakeCatalog{}, set(exA)); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec, "detect [public.a]")
	durable(lc, &change.Unit{Kind: change.KindProgress, End: 0x100})
	select {
	case r := <-lc.o.requests:
		t.Fatalf("snapshot requested (%v) before the replication stage holds the changes", r.Exports)
	default:
	}
	close(rec.detected)
	if req := lc.request(); !slices.Equal(req.Exports, []change.ExportID{exA}) {
		t.Fatalf("request %v", req.Exports)
	}

	begun := make(chan map[change.ExportID]int, 1)
	go func() {
		a, err := lc.Begin(ctx, 0x200, []snapshot.TableInfo{{Table: &change.Table{Export: exA}}})
		if err != nil {
			t.Error(err)
		}
		begun <- a
	}()
	for len(rec.take()) == 0 { // the owner asked for the consistent point
		durable(lc)
	}
	durable(lc, &change.Unit{Kind: change.KindProgress, End: 0x180})
	wantPhase(t, lc, exA, phaseHolding)
	select {
	case a := <-begun:
		t.Fatalf("Begin answered (%v) before the consistent point was set", a)
	default:
	}
	rec.pointSet <- nil
	if a := <-begun; a[exA] != 1 {
		t.Fatalf("attempts %v, want a's first", a)
	}
	wantPhase(t, lc, exA, phaseCopying)
}

// TestLifecyclePhaseIsTheOnlyState takes exports through the transitions whose legality the
// phase machine alone decides (the tracker keeps no state to judge them by), and checks after
// each one that the tracker's state, and every record written (loop.Durable), is the one the
// phase gives.
func TestLifecyclePhaseIsTheOnlyState(t *testing.T) {
	ctx := t.Context()
	lc, rec := startTestOwner(t, snapshot.StrategyChunked, nil)
	if err := lc.published(ctx, fakeCatalog{}, set(exA, exB)); err != nil {
		t.Fatal(err)
	}
	durable(lc, &change.Unit{Kind: change.KindProgress, End: 0x100})
	wantPhase(t, lc, exA, phaseChunking)

	// Failed once: a second report changes nothing, not even the reason.
	lc.Failed(exB, fmt.Errorf("first"))
	lc.Failed(exB, fmt.Errorf("second"))
	wantPhase(t, lc, exB, phaseFailed)
	recs := durable(lc, &change.Unit{Kind: change.KindFailed, Export: exB, Err: "third"})
	if r, ok := recs[exB]; !ok || r.State != watermark.StateFailed || r.Error != "first" {
		t.Fatalf("failed record %+v (present %v), want failed with the first reason", r, ok)
	}
	// A failed export leaves the publication: its records still say failed until the removal.
	rec.take()
	if err := lc.published(ctx, fakeCatalog{wal: 0x300}, set(exA)); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec, "chunk-stop public.b", "remove public.b 0/300")
	wantPhase(t, lc, exB, phaseRemovingFailed)
	durable(lc, &change.Unit{Kind: change.KindProgress, End: 0x200})
	wantPhase(t, lc, exB, phaseRemovingFailed)
	durable(lc, &change.Unit{Kind: change.KindRemoved, Export: exB, End: 0x300})
	wantPhase(t, lc, exB, phaseRemoved)
	// Removed once; a failure after it is no failure.
	durable(lc, &change.Unit{Kind: change.KindRemoved, Export: exB, End: 0x310}, &change.Unit{Kind: change.KindFailed, Export: exB, Err: "late"})
	wantPhase(t, lc, exB, phaseRemoved)

	// a leaves while it is copied in chunks; its last chunk is durable before the removal is:
	// hydrated on its way out, then removed.
	if err := lc.published(ctx, fakeCatalog{wal: 0x400}, set()); err != nil {
		t.Fatal(err)
	}
	wantPhase(t, lc, exA, phaseRemoving)
	durable(lc, &change.Unit{Kind: change.KindHydrated, Export: exA, End: 0x380})
	wantPhase(t, lc, exA, phaseRemovingHydrated)
	// A later poll does not remove it a second time.
	rec.take()
	if err := lc.published(ctx, fakeCatalog{wal: 0x400}, set()); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec)

	// The removal is durable while a transaction published in pieces is not complete: no
	// record is written until it is, so a is not added again before its removal is recorded.
	durable(lc, &change.Unit{Kind: change.KindTxn, Commit: 0x500, Piece: &change.Piece{Changes: 3}},
		&change.Unit{Kind: change.KindRemoved, Export: exA, End: 0x400})
	wantPhase(t, lc, exA, phaseRemoved)
	rec.take()
	if err := lc.published(ctx, fakeCatalog{}, set(exA)); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec)
	wantPhase(t, lc, exA, phaseRemoved)
	recs = durable(lc, &change.Unit{Kind: change.KindTxn, Commit: 0x500, End: 0x508, Piece: &change.Piece{Index: 1, Last: true, Changes: 5}})
	if r, ok := recs[exA]; !ok || r.State != watermark.StateRemoved {
		t.Fatalf("a's record %+v (present %v), want removed", r, ok)
	}
	// Now it is added again: held for a copy that reconciles its whole topic. Until the copy
	// begins it writes no record.
	if err := lc.published(ctx, fakeCatalog{}, set(exA)); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rec, "detect [public.a]")
	wantPhase(t, lc, exA, phaseHolding)
	if recs := durable(lc, &change.Unit{Kind: change.KindProgress, End: 0x600}); len(recs) != 0 {
		t.Fatalf("records while a waits for its copy: %v", recs)
	}
	lc.request()
	if _, err := lc.Begin(ctx, 0x700, []snapshot.TableInfo{{Table: &change.Table{Export: exA}}}); err != nil {
		t.Fatal(err)
	}
	wantPhase(t, lc, exA, phaseCopying)
	recs = durable(lc, &change.Unit{Kind: change.KindProgress, End: 0x700})
	r, ok := recs[exA]
	if !ok || r.State != watermark.StateHydrating || r.Snapshot == nil || r.Snapshot.Attempt != 2 || len(r.Snapshot.ReconcileFrom) != 0 {
		t.Fatalf("a's record %+v (present %v), want hydrating, attempt 2, reconciled from the beginning", r, ok)
	}
}

// TestOwnerServesWhileTopicsAreMade: a topic that takes long to make (a slow broker, a
// controller election) holds back only the table that waits for it. The owner goes on
// answering the sink, so the other tables' watermarks advance, and the new table's copy starts
// once its topic exists.
func TestOwnerServesWhileTopicsAreMade(t *testing.T) {
	ctx := t.Context()
	tr := watermark.NewTracker(watermark.Options{Interval: time.Nanosecond})
	lc, rec := startTestOwnerCfg(t, Config{SnapshotStrategy: snapshot.StrategyChunked}, tr, nil)
	if err := lc.published(ctx, fakeCatalog{}, set(exA)); err != nil {
		t.Fatal(err)
	}
	chunk := &change.Unit{Kind: change.KindChunk, Export: exA, Chunk: &change.Chunk{Seq: 0, Range: change.KeyRange{}, Read: 5}}
	durable(lc, chunk, &change.Unit{Kind: change.KindHydrated, Export: exA, End: 0x200})
	wantPhase(t, lc, exA, phaseHydrated)
	rec.take()

	held, entered := make(chan struct{}), make(chan []string, 1)
	rec.mu.Lock()
	rec.topicsHeld, rec.topicsEntered = held, entered
	rec.mu.Unlock()
	polled := make(chan error, 1)
	go func() { polled <- lc.published(ctx, fakeCatalog{}, set(exA, exB)) }()
	select {
	case names := <-entered:
		if !slices.Equal(names, []string{"p.public.b"}) {
			t.Fatalf("topics made for the poll: %v, want b's", names)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the poll did not ask for b's topic")
	}
	// While b's topic is being made, a's changes become durable and its watermark follows.
	for lsn := change.LSN(0x300); lsn <= 0x700; lsn += 0x100 {
		// a is quiet: the quiet record speaks for it.
		var got *change.LSN
		for _, r := range lc.Durable([]*change.Unit{{Kind: change.KindProgress, End: lsn}}, nil) {
			if q, ok, err := watermark.DecodeQuiet(r.Value); ok && err == nil {
				got = q.Watermark
			} else if v, err := watermark.Decode(r.Value); err == nil && v.Export == exA {
				got = v.Watermark
			}
		}
		lc.Committed()
		if got == nil || *got != lsn {
			t.Fatalf("while b's topic is made: a's watermark %v, want %s", got, lsn)
		}
	}
	wantPhase(t, lc, exB, 0)
	select {
	case err := <-polled:
		t.Fatalf("the poll ended (%v) before b's topic existed", err)
	default:
	}
	close(held)
	select {
	case err := <-polled:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the poll did not end once b's topic existed")
	}
	wantCalls(t, rec, "topic p.public.b compact=true", "start-chunking public.b", "chunk-job public.b attempt 1 after []")
	wantPhase(t, lc, exB, phaseChunking)
}

// TestChunkWindow: a poll that adds more tables than the chunker can take at once starts
// chunkWindow per worker of them, and the next ones as earlier copies end; the poll ends once
// the last one started. Before, every table of a 10,000-table start was chunking at once, most
// of them waiting in the chunker's queue with records of their own in every batch.
func TestChunkWindow(t *testing.T) {
	ctx := t.Context()
	cfg := Config{SnapshotStrategy: snapshot.StrategyChunked}
	cfg.Snapshot.Workers = 1
	lc, _ := startTestOwnerCfg(t, cfg, nil, nil)
	const n = chunkWindow + 50
	var all []change.ExportID
	for i := range n {
		all = append(all, change.ExportID{Schema: "public", Table: fmt.Sprintf("t%03d", i)})
	}
	polled := make(chan error, 1)
	lc.start() // here: the loop's helpers are not safe to start from two goroutines
	go func() { polled <- lc.published(ctx, fakeCatalog{}, set(all...)) }()
	count := func() (chunking, hydrated int) {
		for _, e := range all {
			switch lc.phase(e) {
			case phaseChunking:
				chunking++
			case phaseHydrated:
				hydrated++
			}
		}
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for c, _ := count(); c < chunkWindow && time.Now().Before(deadline); c, _ = count() {
		time.Sleep(10 * time.Millisecond)
	}
	if c, _ := count(); c != chunkWindow {
		t.Fatalf("%d tables chunking after the poll; want %d (chunkWindow for 1 worker)", c, chunkWindow)
	}
	select {
	case err := <-polled:
		t.Fatalf("the poll ended (%v) before its last table's copy started", err)
	default:
	}
	// 60 copies end: the 50 queued ones start, and the poll ends.
	var units []*change.Unit
	for _, e := range all[:60] {
		units = append(units, &change.Unit{Kind: change.KindHydrated, Export: e, End: 0x100})
	}
	durable(lc, units...)
	if err := <-polled; err != nil {
		t.Fatal(err)
	}
	if c, h := count(); c != n-60 || h != 60 {
		t.Fatalf("%d chunking, %d hydrated; want %d and 60", c, h, n-60)
	}
}
