package replication

import (
	"maps"

	"github.com/jackc/pglogrepl"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// A chunked copy merges with the stream through windows. The snapshot stage opens a window for
// a chunk (OpenWindow) and then writes the chunk's low marker into the WAL, reads the chunk in a
// short transaction, hands its rows over (ChunkRead) and writes the high marker. From the low
// marker on, every key of the export that a stream transaction changes is noted in the window.
// When the high marker arrives and every earlier chunk of the export was published, the chunk's
// rows are published without the noted keys: the stream already published a change of those
// that is at least as new as the chunk's read. A chunk whose turn has not come yet keeps its
// window open, so rows are never published behind a newer change of their key.
//
// Transactions before the low marker that the chunk did not see. PostgreSQL writes a
// transaction's commit record (RecordTransactionCommit) before it takes the xid out of the proc
// array (ProcArrayEndTransaction); a snapshot taken in between counts it as running. So the
// stream can deliver a transaction before a chunk's low marker that the chunk's snapshot, taken
// after the marker, does not see: the chunk's row of such a key is older than the change the
// stream published before it. The chunk therefore carries its snapshot (change.XidSnapshot),
// and the keys of every transaction that the stream delivered before the low marker and the
// snapshot does not see are left out of the chunk too, exactly as if it had committed in the
// window. For that the export keeps the keys the stream changed, each with the xid of the last
// transaction that changed it (recent), until a chunk's snapshot sees that transaction: every
// chunk opened after that is read under a later snapshot, which sees it too. A window takes a
// copy of them when it opens and adds the keys delivered until its low marker; when its rows
// (and snapshot) arrive, the keys of transactions the snapshot does not see join its noted keys.
// Per key the last transaction is enough: a transaction that changes a row another one
// changed waits for the other's xid lock, which is released after the other left the proc
// array, so the snapshot that sees the later one sees the earlier one as well.
//
// Transactions delivered before the copy started are not in recent: a new export was not routed
// then, and a re-copied one published them without noting keys. The chunker reads a chunk again
// until its snapshot sees them (Streamed, streamed.go). After a restart, a transaction the
// server sends again below the resumed copy's position is not published again, but its keys are
// noted like any other (touchReplayed): it was published before the restart.

// window is the state of one chunk between OpenWindow and its publication.
type window struct {
	export change.ExportID
	seq    int
	// open: the low marker arrived; keys changed from now on are noted.
	open bool
	// high: the high marker arrived; the chunk is published when its turn comes.
	high bool
	// touched: the keys whose chunk rows are left to the stream; truncated: all of them.
	touched   map[string]struct{}
	truncated bool
	unit      *change.Unit
	// pending: until the rows (and their snapshot) arrive, the keys changed by transactions
	// delivered before the low marker, with the xid of the last one that changed each ("" for
	// a truncate).
	pending map[string]uint32
	// unseen counts the keys left to the stream because the chunk's snapshot did not see a
	// transaction delivered before the low marker.
	unseen int
}

// leave leaves key k (a truncate: "") to the stream.
func (w *window) leave(k string) {
	if k == truncateKey {
		w.truncated = true
		return
	}
	w.touched[k] = struct{}{}
}

// truncateKey stands for a truncate among noted keys (a record key is never empty).
const truncateKey = ""

// drop releases the window's rows: their claim goes back to the chunker's budget.
func (w *window) drop() {
	if w.unit != nil {
		w.unit.Claim.Return()
	}
	w.unit = nil
}

// chunking is the per-export state of a chunked copy on the stream goroutine.
type chunking struct {
	next int // seq of the next chunk to publish
	// total is the number of chunks of the copy, once CopyComplete told it (-1 before).
	total int
	// windows by seq; active counts the open ones (keys are noted only when there are).
	windows map[int]*window
	active  int
	// recent: keys the stream changed, with the xid of the last transaction that changed each,
	// that no chunk snapshot was seen to include yet (see above).
	recent map[string]uint32
}

// OpenWindow registers chunk id (the seq-th of e's chunked copy) before its low marker is
// written. It does not block; the stage applies it before it handles the marker.
func (s *Stage) OpenWindow(id uint64, e change.ExportID, seq int) {
	s.post(func(st *streamState) { st.openWindow(id, e, seq) })
}

// ChunkRead hands over the rows of chunk id (a KindChunk unit) before its high marker is
// written. The unit's Claim goes with it to the sink, which returns it once the unit is durable;
// the stage returns it when it drops the chunk because the export stopped. It does not block.
func (s *Stage) ChunkRead(id uint64, u *change.Unit) {
	s.post(func(st *streamState) { st.chunkRead(id, u) })
}

// AbandonWindow forgets chunk id (its read failed; the snapshot stage reads it again under a
// new id). It does not block.
func (s *Stage) AbandonWindow(id uint64) {
	s.post(func(st *streamState) { st.abandonWindow(id) })
}

// CopyComplete says e's chunked copy has handed over all its chunks, total of them: once the
// last is published, e is hydrated (a KindHydrated unit). It does not block.
func (s *Stage) CopyComplete(e change.ExportID, total int) {
	s.post(func(st *streamState) { st.copyComplete(e, total) })
}

// StartChunking makes e's changes flow to its topic from now on, for a chunked copy of it (a
// new export, or a re-copy of a hydrated one, which keeps its replay filter). It does not
// block: it is applied before anything queued after it, such as the windows of e's chunks.
func (s *Stage) StartChunking(e change.ExportID) {
	s.post(func(st *streamState) { st.startChunking(e, 0) })
}

// ResumeChunking registers an export whose chunked copy resumes after a restart, like Resume:
// changes in transactions committing below position are not published again. Call it before Run.
func (s *Stage) ResumeChunking(e change.ExportID, position change.LSN) {
	s.state.startChunking(e, position)
}

func (st *streamState) startChunking(e change.ExportID, replayBelow change.LSN) {
	r, ok := st.routes[e]
	if !ok || r.mode != routeDirect {
		if ok && r.hold != nil {
			r.hold.Close()
		}
		r = &route{replayBelow: replayBelow}
		st.routes[e] = r
	}
	st.dropWindows(r)
	r.mode = routeMerge
	st.watch[e] = struct{}{}
	r.chunks = &chunking{total: -1, windows: make(map[int]*window), recent: make(map[string]uint32)}
}

func (st *streamState) openWindow(id uint64, e change.ExportID, seq int) {
	r, ok := st.routes[e]
	if !ok || r.mode != routeMerge {
		return
	}
	if old, ok := r.chunks.windows[seq]; ok { // a retry of the same chunk
		st.removeWindow(r, old)
	}
	w := &window{export: e, seq: seq, touched: make(map[string]struct{}), pending: maps.Clone(r.chunks.recent)}
	r.chunks.windows[seq] = w
	if st.windows == nil {
		st.windows = make(map[uint64]*window)
	}
	st.windows[id] = w
}

func (st *streamState) chunkRead(id uint64, u *change.Unit) {
	w, ok := st.windows[id]
	if !ok {
		u.Claim.Return()
		return
	}
	w.unit = u
	snap := u.Chunk.Snapshot
	for k, xid := range w.pending {
		if !snap.Sees(xid) {
			w.leave(k)
			w.unseen++
		}
	}
	w.pending = nil
	// Every chunk opened from now on reads under a later snapshot: it sees what this one sees.
	if r, ok := st.routes[w.export]; ok && r.chunks != nil {
		maps.DeleteFunc(r.chunks.recent, func(_ string, xid uint32) bool { return snap.Sees(xid) })
	}
}

func (st *streamState) abandonWindow(id uint64) {
	w, ok := st.windows[id]
	if !ok {
		return
	}
	delete(st.windows, id)
	if r, ok := st.routes[w.export]; ok && r.chunks != nil && r.chunks.windows[w.seq] == w {
		st.removeWindow(r, w)
	}
	w.drop()
}

func (st *streamState) copyComplete(e change.ExportID, total int) {
	r, ok := st.routes[e]
	if !ok || r.mode != routeMerge {
		return
	}
	r.chunks.total = total
}

// removeWindow takes w out of r's windows.
func (st *streamState) removeWindow(r *route, w *window) {
	delete(r.chunks.windows, w.seq)
	if w.open {
		r.chunks.active--
	}
	w.drop()
}

// dropWindows forgets every window of r (the export stops, or its copy starts over).
func (st *streamState) dropWindows(r *route) {
	if r.chunks == nil {
		return
	}
	for id, w := range st.windows {
		if r.chunks.windows[w.seq] == w {
			delete(st.windows, id)
		}
	}
	for _, w := range r.chunks.windows {
		w.drop()
	}
	r.chunks = nil
}

// marker handles a logical decoding message: a chunk's low or high marker.
func (st *streamState) marker(m *pglogrepl.LogicalDecodingMessage) error {
	if m.Transactional || m.Prefix != change.MarkerPrefix {
		return nil
	}
	id, high, ok := change.ParseChunkMarker(st.s.cfg.MarkerTag, string(m.Content))
	if !ok {
		return nil
	}
	// The snapshot stage queued the window (and, for a high marker, the rows) before it wrote
	// the marker: apply what is queued first.
	st.control()
	w, ok := st.windows[id]
	if !ok {
		return nil // abandoned
	}
	r := st.routes[w.export]
	if r == nil || r.chunks == nil || r.chunks.windows[w.seq] != w {
		delete(st.windows, id)
		w.drop()
		return nil
	}
	if !high {
		if !w.open {
			w.open = true
			r.chunks.active++
		}
		return nil
	}
	if !w.open || w.unit == nil {
		// Its low marker or rows never reached us: the chunk cannot be merged safely. Its read
		// failed on the snapshot side, which abandons and reads it again.
		return nil
	}
	w.high = true
	delete(st.windows, id)
	return st.publishChunks(w.export, r)
}

// publishChunks publishes r's chunks whose turn came, in order, and hydrates the export after
// the last one.
func (st *streamState) publishChunks(e change.ExportID, r *route) error {
	c := r.chunks
	for {
		w, ok := c.windows[c.next]
		if !ok || !w.high {
			break
		}
		u := w.unit
		kept := u.Records[:0]
		if !w.truncated {
			for _, rec := range u.Records {
				if _, changed := w.touched[string(rec.Key)]; !changed {
					kept = append(kept, rec)
				}
			}
		}
		clear(u.Records[len(kept):])
		u.Records, u.Rows = kept, len(kept)
		if w.unseen > 0 {
			st.log.Info("chunk: keys left to the stream, changed before its low marker by transactions its snapshot did not see",
				"export", e.String(), "chunk", w.seq, "keys", w.unseen, "rows_published", u.Rows)
		}
		// The rows stay in memory until the sink has them: their claim goes with the unit.
		w.unit = nil
		st.removeWindow(r, w)
		c.next++
		if err := st.emit(u); err != nil {
			return err
		}
		if r.chunks != c { // the export stopped while emit waited
			return nil
		}
	}
	if c.total >= 0 && c.next >= c.total {
		r.mode, r.chunks = routeDirect, nil
		st.s.hydrated.NoteTo(st.log, e.String(), "export", e.String(), "chunks", c.total, "stream_lsn", st.pos.String())
		return st.emit(&change.Unit{Kind: change.KindHydrated, Export: e, End: st.pos})
	}
	return nil
}

// noteKeys notes the keys a committed transaction (or a piece of one) changed, for the chunks
// of their exports: in the open windows; in the windows before their low marker, when the
// chunk's snapshot does not see the transaction (or is not known yet); and among the export's
// recent keys.
func (st *streamState) noteKeys() {
	xid := st.tx.xid
	for e, keys := range st.tx.touched {
		r, ok := st.routes[e]
		if !ok || r.chunks == nil {
			continue
		}
		for _, key := range keys {
			k := string(key) // a truncate (nil): truncateKey
			r.chunks.recent[k] = xid
			for _, w := range r.chunks.windows {
				switch {
				case w.open:
					w.leave(k)
				case w.unit == nil:
					if w.pending == nil {
						w.pending = make(map[string]uint32)
					}
					w.pending[k] = xid
				case !w.unit.Chunk.Snapshot.Sees(xid):
					w.leave(k)
					w.unseen++
				}
			}
		}
	}
	clear(st.tx.touched)
}

// touch notes, for an export being copied in chunks, the keys of records of the open
// transaction (a nil key: a truncate).
func (st *streamState) touch(e change.ExportID, r *route, records []change.Record) {
	if r.chunks == nil {
		return
	}
	if st.tx.touched == nil {
		st.tx.touched = make(map[change.ExportID][][]byte)
	}
	keys := st.tx.touched[e]
	for i := range records {
		k := records[i].Key
		if records[i].Partition == change.AllPartitions {
			k = nil // a truncate (its record has a key of no columns on a keyed table)
		}
		keys = append(keys, k)
	}
	st.tx.touched[e] = keys
}

// touchReplayed notes the keys of a change that is not published again because its transaction
// was published before a restart (below the route's replayBelow), for the export's resumed
// chunked copy: a chunk whose snapshot does not see that transaction (still in the proc array)
// leaves those keys to the stream, which published the change before the restart. A change
// that does not encode is left alone: it failed the export the first time.
func (st *streamState) touchReplayed(rel *relation, r *route, encode encodeFunc, src codec.Source) {
	recs, err := encode(rel.enc, st.replayed[:0], src, rel.ncols)
	if err == nil {
		st.touch(rel.export, r, recs)
	}
	clear(recs)
	st.replayed = recs[:0]
}
