package watermark

import (
	"slices"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

func chunk(seq int, to []string, read int) *change.Chunk {
	return &change.Chunk{Seq: seq, Range: change.KeyRange{To: to}, Read: read, Estimated: 1000}
}

// A chunked copy streams: the export has an own position that follows the stream and pins WAL,
// but publishes no watermark until it is hydrated; each durable chunk gets its record at once.
func TestChunkedCopyLifecycle(t *testing.T) {
	tr := newTracker(Options{Interval: testInterval})
	fullHydration(tr, exA, 0x100, trackerT0)
	tr.Advance(0x200)
	duePublish(t, tr, trackerT0)

	if !tr.CanChunk(exB) {
		t.Fatal("a new export cannot take a chunked copy")
	}
	if a := own(tr).StartChunked(exB, "p.b", 1000, map[int32]int64{0: 5}, trackerT0); a != 1 {
		t.Fatalf("attempt %d, want 1", a)
	}
	recs := duePublish(t, tr, trackerT0.Add(time.Millisecond))
	r, ok := recs[exB]
	if !ok || r.State != StateHydrating || r.Watermark != nil || r.Snapshot.Strategy != StrategyChunked {
		t.Fatalf("start record %+v, want hydrating, no watermark, strategy chunked", r)
	}
	tr.Advance(0x300)
	if p := tr.Resume()[exB]; p != 0x300 {
		t.Fatalf("b's position %s, want the stream's 0/300", p)
	}

	// A chunk becomes durable: a record at once, saying where the copy goes on.
	tr.ChunkDone(exB, chunk(0, []string{"500"}, 400), trackerT0.Add(2*time.Millisecond))
	var rb *Record
	for _, x := range tr.Due(trackerT0.Add(2*time.Millisecond), fakeEndOffsets) {
		if x.Export == exB {
			rb = &x
		}
	}
	if rb == nil || rb.Snapshot.ChunksDone != 1 || !slices.Equal(rb.Snapshot.ResumeAfter, []string{"500"}) || rb.Snapshot.RowsCopied != 400 || rb.Watermark != nil {
		t.Fatalf("chunk record %+v, want 1 chunk, resume after [500], 400 rows, no watermark", rb)
	}
	if rb.Snapshot.RowsEstimated != 1000 {
		t.Fatalf("rows estimated %d, want the chunk's estimate 1000", rb.Snapshot.RowsEstimated)
	}
	// Before it is durable, the slot is confirmed no further than b's durable start record.
	tr.Advance(0x400)
	if c, _ := tr.Confirmable(); c > 0x300 {
		t.Fatalf("confirmable %s while b's record at 0/300 is in flight", c)
	}
	tr.Published()

	// The last chunk, then hydrated: a watermark at last.
	tr.ChunkDone(exB, chunk(1, nil, 600), trackerT0.Add(3*time.Millisecond))
	own(tr).Hydrated(exB, 0x400)
	recs = duePublish(t, tr, trackerT0.Add(4*time.Millisecond))
	r = recs[exB]
	if r.State != StateHydrated || r.Watermark == nil || *r.Watermark != 0x400 || r.Snapshot.FinishedAt == nil || r.Snapshot.ChunksDone != 2 {
		t.Fatalf("hydrated record %+v, want watermark 0/400, 2 chunks, finished", r)
	}
}

// After a restart a chunked copy resumes: same attempt, its position as replay filter, the key
// to go on after; a copy that needs reconciling cannot be chunked.
func TestChunkedCopyRestore(t *testing.T) {
	tr := newTracker(Options{Interval: testInterval})
	own(tr).StartChunked(exB, "p.b", 1000, map[int32]int64{0: 0}, trackerT0)
	tr.Advance(0x500)
	tr.ChunkDone(exB, chunk(0, []string{"7", "x"}, 10), trackerT0)
	var recs []Record
	recs = append(recs, tr.Due(trackerT0, fakeEndOffsets)...)
	tr.Published()

	re := newTracker(Options{Interval: testInterval})
	re.Restore(recs)
	re.RestoreCheckpoint(0x600)
	if p, ok := re.Resume()[exB]; !ok || p != 0x600 {
		t.Fatalf("resume %v, want b at the checkpoint 0/600, above its record's 0/500", re.Resume())
	}
	a, after, ok := re.Chunked(exB)
	if !ok || a != 1 || !slices.Equal(after, []string{"7", "x"}) {
		t.Fatalf("Chunked = %d %v %v, want attempt 1 after [7 x]", a, after, ok)
	}
	if c, _ := re.Confirmable(); c != 0x600 {
		t.Fatalf("confirmable %s, want the checkpoint 0/600 (b streams and resumes there)", c)
	}

	// Removed, then added again: its topic must be reconciled, which only a copy does.
	own(re).Removed(exB, 0x700)
	if re.CanChunk(exB) {
		t.Fatal("a removed export may take a chunked copy")
	}
	// Held again before the removal took effect: a hydrated (or chunked) export stops streaming.
	tr2 := newTracker(Options{Interval: testInterval})
	own(tr2).StartChunked(exC, "p.c", 10, nil, trackerT0)
	own(tr2).Holding(exC)
	if _, ok := tr2.Resume()[exC]; ok || tr2.CanChunk(exC) {
		t.Fatal("a held export still streams or may take a chunked copy")
	}
}

// A re-copy of a hydrated export keeps the position it reached and goes back to hydrating
// (no watermark) until its last chunk.
func TestChunkedReCopy(t *testing.T) {
	tr := newTracker(Options{Interval: testInterval})
	fullHydration(tr, exA, 0x100, trackerT0)
	tr.Advance(0x800)
	first := duePublish(t, tr, trackerT0)[exA]
	if !tr.CanChunk(exA) {
		t.Fatal("a hydrated export cannot be copied again in chunks")
	}
	if a := own(tr).StartChunked(exA, "p.a", 10, nil, trackerT0.Add(time.Millisecond)); a != 2 {
		t.Fatalf("re-copy attempt %d, want 2", a)
	}
	if p := tr.Resume()[exA]; p != 0x800 {
		t.Fatalf("position %s after the re-copy started, want 0/800 kept", p)
	}
	r := duePublish(t, tr, trackerT0.Add(2*time.Millisecond))[exA]
	if r.State != StateHydrating || r.Watermark == nil || *r.Watermark != *first.Watermark {
		t.Fatalf("re-copy record %+v: hydrating, keeping the published watermark %s", r, first.Watermark)
	}
}
