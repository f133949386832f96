package replication

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

const testTag = "test/1"

// markerMsg is a non-transactional logical decoding message: a chunk's low or high marker.
func markerMsg(lsn change.LSN, content string) []byte {
	b := []byte{'M', 0}
	b = binary.BigEndian.AppendUint64(b, uint64(lsn))
	b = append(append(b, change.MarkerPrefix...), 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
	return xlog(append(b, content...))
}

func update(rel uint32, id, v string) []byte {
	b := []byte{'U'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'N')
	return xlog(tuple(b, id, v))
}

func deleteMsg(rel uint32, id string) []byte {
	b := []byte{'D'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'K')
	b = binary.BigEndian.AppendUint16(b, 2)
	b = append(b, 't')
	b = binary.BigEndian.AppendUint32(b, uint32(len(id)))
	b = append(b, id...)
	return xlog(append(b, 'n'))
}

// chunkStream returns a stream whose export b is copied in chunks (a is hydrated).
func chunkStream(t *testing.T) (*streamState, chan *change.Unit, *codec.Encoder) {
	t.Helper()
	s := New(Config{Codec: codec.Config{TopicPrefix: "p", Tombstones: true}, SpillDir: t.TempDir(), HoldMemory: 1 << 20, MarkerTag: testTag}, fakeHooks{})
	s.Resume(map[change.ExportID]change.LSN{tA: 0})
	out := make(chan *change.Unit, 1000)
	st := s.state
	st.ctx, st.out = t.Context(), out
	st.startChunking(tB, 0)
	feed(t, st, relationMsg(1, "public", "a"), relationMsg(2, "public", "b"))
	enc := st.rels[2].enc
	return st, out, enc
}

// chunkUnit encodes rows (ids) of b as chunk seq's rows read at low.
func chunkUnit(t *testing.T, enc *codec.Encoder, seq int, low change.LSN, last bool, ids ...string) *change.Unit {
	t.Helper()
	u := &change.Unit{Kind: change.KindChunk, Export: tB, Commit: low, Chunk: &change.Chunk{Seq: seq, Read: len(ids)}}
	if !last {
		u.Chunk.Range.To = []string{"x"}
	}
	for _, id := range ids {
		var err error
		u.Records, err = enc.Read(u.Records, codec.Source{LSN: low, Snapshot: true}, [][]byte{[]byte(id), []byte("chunk")})
		if err != nil {
			t.Fatal(err)
		}
	}
	return u
}

func ids(t *testing.T, u *change.Unit) []string {
	var out []string
	for _, r := range u.Records {
		out = append(out, afterID(t, r))
	}
	return out
}

// A chunk's rows are published at its high marker, without the keys the stream changed after
// its low marker; changes before the low marker and after the high marker do not count.
func TestChunkWindowDropsChangedKeys(t *testing.T) {
	st, out, enc := chunkStream(t)
	slots := change.NewBudget(1)
	st.openWindow(7, tB, 0)
	// Before the low marker: published directly, does not touch the window.
	feed(t, st, begin(0x100, 1), insert(2, "1", "before"), commit(0x100, 0x108))
	feed(t, st, markerMsg(0x110, change.ChunkMarker(testTag, 7, false)))
	// Inside the window: an update of 2, a delete of 3, an insert of 9 (not in the chunk).
	feed(t, st, begin(0x200, 2), update(2, "2", "new"), deleteMsg(2, "3"), insert(2, "9", "ins"), commit(0x200, 0x208))
	u := chunkUnit(t, enc, 0, 0x110, true, "1", "2", "3", "4")
	u.Claim = slots.Take(1)
	st.chunkRead(7, u)
	st.copyComplete(tB, 1)
	feed(t, st, markerMsg(0x300, change.ChunkMarker(testTag, 7, true)))
	// After the high marker: not the chunk's business.
	feed(t, st, begin(0x400, 3), update(2, "4", "after"), commit(0x400, 0x408))

	units := drain(out)
	if got := kinds(units); len(got) != 5 || got[2] != change.KindChunk || got[3] != change.KindHydrated {
		t.Fatalf("units %v, want txn, txn, chunk, hydrated, txn", got)
	}
	if got := ids(t, units[2]); len(got) != 2 || got[0] != "1" || got[1] != "4" || units[2].Rows != 2 {
		t.Fatalf("chunk published ids %v (rows %d), want [1 4]: 2 and 3 changed in its window", got, units[2].Rows)
	}
	// The rows' slot is freed once the sink has them, not when they are handed to it.
	if slots.InUse() != 1 || units[2].Claim == nil {
		t.Fatalf("slot freed before the sink made the chunk durable")
	}
	units[2].Claim.Return()
	if slots.InUse() != 0 {
		t.Fatalf("slot not freed once the chunk is durable")
	}
	if st.routes[tB].mode != routeDirect {
		t.Fatalf("b is not hydrated after its last chunk")
	}
}

// Chunks are published in order: a chunk whose high marker comes before an earlier chunk's
// waits, keeping its window open, so a change after its high marker still wins.
func TestChunksPublishInOrder(t *testing.T) {
	st, out, enc := chunkStream(t)
	st.openWindow(1, tB, 0)
	st.openWindow(2, tB, 1)
	feed(t, st, markerMsg(0x100, change.ChunkMarker(testTag, 1, false)), markerMsg(0x110, change.ChunkMarker(testTag, 2, false)))
	st.chunkRead(2, chunkUnit(t, enc, 1, 0x110, true, "5", "6"))
	feed(t, st, markerMsg(0x200, change.ChunkMarker(testTag, 2, true)))
	// Chunk 1 (seq 1) waits for chunk 0; meanwhile 6 changes: it must not be published after.
	feed(t, st, begin(0x300, 1), update(2, "6", "newer"), commit(0x300, 0x308))
	st.chunkRead(1, chunkUnit(t, enc, 0, 0x100, false, "1", "2"))
	feed(t, st, markerMsg(0x400, change.ChunkMarker(testTag, 1, true)))
	st.copyComplete(tB, 2)
	if err := st.yield(); err != nil {
		t.Fatal(err)
	}
	var chunks [][]string
	hydrated := false
	for _, u := range drain(out) {
		switch u.Kind {
		case change.KindChunk:
			chunks = append(chunks, ids(t, u))
		case change.KindHydrated:
			hydrated = true
		}
	}
	if len(chunks) != 2 || len(chunks[0]) != 2 || chunks[0][0] != "1" || len(chunks[1]) != 1 || chunks[1][0] != "5" {
		t.Fatalf("chunks %v, want [[1 2] [5]]", chunks)
	}
	if !hydrated {
		t.Fatal("b not hydrated after both chunks and CopyComplete")
	}
}

// A truncate in a window drops the whole chunk; an abandoned window publishes nothing; markers
// of another tag are ignored.
func TestChunkWindowTruncateAbandonAndForeignMarkers(t *testing.T) {
	st, out, enc := chunkStream(t)
	st.openWindow(1, tB, 0)
	feed(t, st, markerMsg(0x100, change.ChunkMarker(testTag, 1, false)))
	b := []byte{'T'}
	b = binary.BigEndian.AppendUint32(b, 1)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, 2)
	feed(t, st, begin(0x200, 1), xlog(b), commit(0x200, 0x208))
	st.chunkRead(1, chunkUnit(t, enc, 0, 0x100, false, "1", "2"))
	feed(t, st, markerMsg(0x300, change.ChunkMarker("other/9", 1, true)))
	for _, u := range drain(out) {
		if u.Kind == change.KindChunk {
			t.Fatal("a marker of another tag published the chunk")
		}
	}
	feed(t, st, markerMsg(0x310, change.ChunkMarker(testTag, 1, true)))
	for _, u := range drain(out) {
		if u.Kind == change.KindChunk && len(u.Records) != 0 {
			t.Fatalf("chunk after a truncate in its window published %d rows", len(u.Records))
		}
	}
	// The next chunk is abandoned (its read failed) and read again under a new id.
	slots := change.NewBudget(1)
	st.openWindow(2, tB, 1)
	feed(t, st, markerMsg(0x400, change.ChunkMarker(testTag, 2, false)))
	u := chunkUnit(t, enc, 1, 0x400, true, "3")
	u.Claim = slots.Take(1)
	st.chunkRead(2, u)
	st.abandonWindow(2)
	if slots.InUse() != 0 {
		t.Fatalf("abandoned chunk's slot not freed")
	}
	feed(t, st, markerMsg(0x410, change.ChunkMarker(testTag, 2, true)))
	st.openWindow(3, tB, 1)
	feed(t, st, markerMsg(0x500, change.ChunkMarker(testTag, 3, false)))
	st.chunkRead(3, chunkUnit(t, enc, 1, 0x500, true, "4"))
	feed(t, st, markerMsg(0x510, change.ChunkMarker(testTag, 3, true)))
	var got [][]string
	for _, u := range drain(out) {
		if u.Kind == change.KindChunk {
			got = append(got, ids(t, u))
		}
	}
	if len(got) != 1 || len(got[0]) != 1 || got[0][0] != "4" {
		t.Fatalf("after the retry: chunks %v, want [[4]]", got)
	}
}

// truncateMsg truncates relation rel.
func truncateMsg(rel uint32) []byte {
	b := []byte{'T'}
	b = binary.BigEndian.AppendUint32(b, 1)
	b = append(b, 0)
	return xlog(binary.BigEndian.AppendUint32(b, rel))
}

// A transaction the stream delivers before a chunk's low marker, but that the chunk's snapshot
// still sees as running (its commit record was written, its xid not yet out of the proc array),
// is newer than the chunk's rows: its keys are left to the stream, as if it had committed in the
// window. One the snapshot sees leaves the chunk alone.
func TestChunkWindowUnseenTransactionBeforeLowMarker(t *testing.T) {
	xip := &change.XidSnapshot{Xmin: 490, Xmax: 510, Xip: []uint32{490, 500}}
	above := &change.XidSnapshot{Xmin: 490, Xmax: 500, Xip: []uint32{490}}
	seen := &change.XidSnapshot{Xmin: 490, Xmax: 510, Xip: []uint32{490}}
	tx500 := [][]byte{begin(0x100, 500), update(2, "2", "newer"), commit(0x100, 0x108)}
	trunc500 := [][]byte{begin(0x100, 500), truncateMsg(2), commit(0x100, 0x108)}
	low, high := markerMsg(0x110, change.ChunkMarker(testTag, 7, false)), markerMsg(0x300, change.ChunkMarker(testTag, 7, true))
	for _, tc := range []struct {
		name string
		snap *change.XidSnapshot
		// order of events: "open" (OpenWindow), "tx" (the transaction of xid 500), "low",
		// "rows" (ChunkRead), "high".
		steps []string
		tx    [][]byte
		want  []string
	}{
		{"in the snapshot's running xids", xip, []string{"open", "tx", "low", "rows", "high"}, tx500, []string{"1", "3"}},
		{"at or above the snapshot's xmax", above, []string{"open", "tx", "low", "rows", "high"}, tx500, []string{"1", "3"}},
		{"seen by the snapshot", seen, []string{"open", "tx", "low", "rows", "high"}, tx500, []string{"1", "2", "3"}},
		{"streamed before the window opened", xip, []string{"tx", "open", "low", "rows", "high"}, tx500, []string{"1", "3"}},
		{"streamed after the rows arrived", xip, []string{"open", "rows", "tx", "low", "high"}, tx500, []string{"1", "3"}},
		{"seen, streamed after the rows arrived", seen, []string{"open", "rows", "tx", "low", "high"}, tx500, []string{"1", "2", "3"}},
		{"a truncate the snapshot does not see", xip, []string{"open", "tx", "low", "rows", "high"}, trunc500, nil},
		{"a truncate the snapshot sees", seen, []string{"open", "tx", "low", "rows", "high"}, trunc500, []string{"1", "2", "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, out, enc := chunkStream(t)
			u := chunkUnit(t, enc, 0, 0x110, true, "1", "2", "3")
			u.Chunk.Snapshot = tc.snap
			for _, step := range tc.steps {
				switch step {
				case "open":
					st.openWindow(7, tB, 0)
				case "tx":
					feed(t, st, tc.tx...)
				case "low":
					feed(t, st, low)
				case "rows":
					st.chunkRead(7, u)
					st.copyComplete(tB, 1)
				case "high":
					feed(t, st, high)
				}
			}
			var chunks [][]string
			for _, u := range drain(out) {
				if u.Kind == change.KindChunk {
					chunks = append(chunks, ids(t, u))
				}
			}
			if len(chunks) != 1 || !slices.Equal(chunks[0], tc.want) {
				t.Fatalf("chunks published %v, want one with ids %v", chunks, tc.want)
			}
		})
	}
}

// The keys the stream changed are kept for the chunks to come only until a chunk's snapshot
// sees their transactions: a later chunk's snapshot is taken after, and sees them too.
func TestChunkRecentKeysPrunedBySnapshot(t *testing.T) {
	st, _, enc := chunkStream(t)
	feed(t, st, begin(0x100, 500), update(2, "2", "a"), commit(0x100, 0x108),
		begin(0x120, 501), update(2, "3", "b"), commit(0x120, 0x128))
	if got := len(st.routes[tB].chunks.recent); got != 2 {
		t.Fatalf("recent keys %d, want 2", got)
	}
	st.openWindow(7, tB, 0)
	feed(t, st, markerMsg(0x130, change.ChunkMarker(testTag, 7, false)))
	u := chunkUnit(t, enc, 0, 0x130, false, "1")
	u.Chunk.Snapshot = &change.XidSnapshot{Xmin: 501, Xmax: 510, Xip: []uint32{501}}
	st.chunkRead(7, u)
	recent := st.routes[tB].chunks.recent
	if _, ok := recent[`{"id":3}`]; len(recent) != 1 || !ok {
		t.Fatalf("recent keys after a snapshot that sees xid 500 only: %v, want the key of xid 501's change", recent)
	}
}

// A window opened before another chunk's snapshot pruned the recent keys keeps its own copy:
// its snapshot may be older than the other's.
func TestChunkWindowKeepsKeysPrunedAfterItOpened(t *testing.T) {
	st, out, enc := chunkStream(t)
	st.openWindow(7, tB, 0)
	st.openWindow(8, tB, 1)
	feed(t, st, begin(0x100, 500), update(2, "2", "newer"), commit(0x100, 0x108),
		markerMsg(0x110, change.ChunkMarker(testTag, 7, false)), markerMsg(0x120, change.ChunkMarker(testTag, 8, false)))
	later := chunkUnit(t, enc, 1, 0x120, true, "5")
	later.Chunk.Snapshot = &change.XidSnapshot{Xmin: 501, Xmax: 510}
	st.chunkRead(8, later)
	if n := len(st.routes[tB].chunks.recent); n != 0 {
		t.Fatalf("recent keys %d after a snapshot that sees every transaction, want 0", n)
	}
	first := chunkUnit(t, enc, 0, 0x110, false, "1", "2")
	first.Chunk.Snapshot = &change.XidSnapshot{Xmin: 500, Xmax: 501, Xip: []uint32{500}}
	st.chunkRead(7, first)
	st.copyComplete(tB, 2)
	feed(t, st, markerMsg(0x200, change.ChunkMarker(testTag, 7, true)), markerMsg(0x210, change.ChunkMarker(testTag, 8, true)))
	var chunks [][]string
	for _, u := range drain(out) {
		if u.Kind == change.KindChunk {
			chunks = append(chunks, ids(t, u))
		}
	}
	if len(chunks) != 2 || !slices.Equal(chunks[0], []string{"1"}) || !slices.Equal(chunks[1], []string{"5"}) {
		t.Fatalf("chunks %v, want [[1] [5]]: xid 500 changed 2 and the first chunk's snapshot does not see it", chunks)
	}
}

// After a restart, a transaction published before it (below the resumed copy's position) is
// not published again; when the server sends it again, its keys are still noted for the
// resumed copy's chunks: a chunk whose snapshot does not see it (still in the proc array) would
// otherwise publish the row from before it, after its change.
func TestChunkResumeNotesReplayedKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		snap *change.XidSnapshot
		want []string
	}{
		{"not seen by the chunk's snapshot", &change.XidSnapshot{Xmin: 490, Xmax: 510, Xip: []uint32{500}}, []string{"1", "3"}},
		{"seen by the chunk's snapshot", &change.XidSnapshot{Xmin: 490, Xmax: 510}, []string{"1", "2", "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, out, enc := chunkStream(t)
			st.startChunking(tB, 0x200) // resumed: published below 0x200 before the restart
			st.openWindow(7, tB, 0)
			feed(t, st, begin(0x100, 500), update(2, "2", "newer"), commit(0x100, 0x108),
				markerMsg(0x210, change.ChunkMarker(testTag, 7, false)))
			u := chunkUnit(t, enc, 0, 0x210, true, "1", "2", "3")
			u.Chunk.Snapshot = tc.snap
			st.chunkRead(7, u)
			st.copyComplete(tB, 1)
			feed(t, st, markerMsg(0x300, change.ChunkMarker(testTag, 7, true)))
			var chunks [][]string
			for _, u := range drain(out) {
				switch {
				case u.Kind == change.KindChunk:
					chunks = append(chunks, ids(t, u))
				case len(u.Records) > 0:
					t.Errorf("a %v unit with %d records: the replayed transaction was published again", u.Kind, len(u.Records))
				}
			}
			if len(chunks) != 1 || !slices.Equal(chunks[0], tc.want) {
				t.Fatalf("chunks published %v, want one with ids %v", chunks, tc.want)
			}
		})
	}
}

// A yield point looks only at the exports being copied or removed: hydrated ones are not in its
// watch set, and an export leaves it once its copy is published.
func TestYieldWatchesOnlyCopiesInFlight(t *testing.T) {
	st, out, enc := chunkStream(t)
	many := make(map[change.ExportID]change.LSN)
	for i := range 1000 {
		many[change.ExportID{Schema: "public", Table: fmt.Sprintf("h%d", i)}] = 0
	}
	st.s.Resume(many)
	if err := st.yield(); err != nil {
		t.Fatal(err)
	}
	if len(st.watch) != 1 {
		t.Fatalf("watch set of %d exports, want 1 (b, being copied): %v", len(st.watch), st.watch)
	}
	st.openWindow(1, tB, 0)
	feed(t, st, markerMsg(0x100, change.ChunkMarker(testTag, 1, false)))
	st.chunkRead(1, chunkUnit(t, enc, 0, 0x100, true, "1"))
	feed(t, st, markerMsg(0x200, change.ChunkMarker(testTag, 1, true)))
	st.copyComplete(tB, 1)
	feed(t, st, begin(0x300, 1), update(1, "1", "x"), commit(0x300, 0x308))
	if err := st.yield(); err != nil {
		t.Fatal(err)
	}
	hydrated := false
	for _, u := range drain(out) {
		hydrated = hydrated || u.Kind == change.KindHydrated && u.Export == tB
	}
	if !hydrated {
		t.Fatal("b not hydrated")
	}
	if err := st.yield(); err != nil {
		t.Fatal(err)
	}
	if len(st.watch) != 0 {
		t.Fatalf("watch set after b's copy: %v, want empty", st.watch)
	}
	st.remove(tA, 0x400)
	if _, ok := st.watch[tA]; !ok {
		t.Fatal("a removed export is not watched until it drains")
	}
}
