package replication

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// Encoding a row change (text tuple to key and value bytes) is most of the stream goroutine's
// work. With Config.Encoders workers, the stream goroutine reads up to aheadMessages messages
// ahead of the one it handles, and hands the row changes among them, in batches of up to
// batchChanges, to workers that encode them with their own clones of the relation's encoder
// (their own arenas). It still handles every message in order, itself, exactly as without
// workers: when it reaches a row change, it takes the records the worker made instead of
// encoding them, but only if the worker encoded it under the state the change meets now (the
// same encoder and the same source: commit LSN, xid, commit time and sequence). Anything read
// ahead under another state (a Relation message or a control call in between, a transaction
// replayed, a change the worker could not encode) is read and encoded again in place, as without
// workers. So the units, their order and every decision (pieces, failed exports, chunk windows'
// keys) are those of the inline path, byte for byte; a unit reaches the sink only after all its
// records are encoded, since the stream goroutine builds it from them. A batch no worker has
// started when the stream goroutine reaches it is encoded in place too (the stream goroutine
// takes it back), so the stream goroutine never waits for a worker that has not begun.

const (
	// aheadMessages bounds the messages read ahead of the one being handled.
	aheadMessages = 256
	// batchChanges is the most row changes in one batch handed to a worker.
	batchChanges = 16
	// maxClones bounds each worker's encoder clones (one per relation and schema version).
	maxClones = 256
)

// encodeBatch states: queued for a worker, taken by a worker, or taken back (or being filled)
// by the stream goroutine.
const (
	batchQueued int32 = iota
	batchWorker
	batchStream
)

// encodeItem is one row change of a batch, and what the worker made of it.
type encodeItem struct {
	data  []byte // the pgoutput message
	enc   *codec.Encoder
	src   codec.Source
	ncols int
	// records[from:to] of the batch are its records, unless failed: the worker could not
	// encode it, the stream goroutine reads it again (and meets the same error).
	from, to int
	failed   bool
}

// encodeBatch is a run of row changes handed to the workers. The stream goroutine fills it
// and queues it; a worker that takes it (state batchQueued → batchWorker) encodes every item
// and signals done; the stream goroutine reads it only after done, or after taking it back.
type encodeBatch struct {
	state   atomic.Int32
	done    chan struct{}
	n       int
	items   [batchChanges]encodeItem
	records []change.Record
	// Stream goroutine only: ready once waited for or taken back; handled items.
	ready, takenBack bool
	handled          int
}

// aheadEntry is a message read ahead; batch and item name its row change's encoding, if any.
type aheadEntry struct {
	data  []byte
	batch *encodeBatch
	item  int
	// relation: a Relation message, of relation relID.
	relation bool
	relID    uint32
}

// ahead is the read-ahead window and the workers of one loop (one connection).
type ahead struct {
	jobs   chan *encodeBatch
	wg     sync.WaitGroup
	q      [aheadMessages]aheadEntry
	head   int
	n      int
	open   *encodeBatch
	free   []*encodeBatch
	closed bool
	// The transaction the next message read belongs to, as far as it can be foreseen: inTx
	// is false when it cannot (no Begin read, a truncate, an unknown relation).
	inTx bool
	src  codec.Source
	// relations are the Relation messages read ahead and not yet handled, by relation: until
	// they are, the encoders they bring are unknown.
	relations map[uint32]pendingRelation
}

// pendingRelation counts a relation's Relation messages read ahead and names the export of the
// last one (ok false: it does not parse).
type pendingRelation struct {
	n      int
	export change.ExportID
	ok     bool
}

func startAhead(workers int) *ahead {
	// Room for every batch twice: a batch taken back stays queued until a worker skips it.
	a := &ahead{jobs: make(chan *encodeBatch, 2*aheadMessages), relations: make(map[uint32]pendingRelation)}
	for range workers {
		w := &encodeWorker{clones: make(map[*codec.Encoder]*codec.Encoder)}
		a.wg.Go(func() { w.run(a.jobs) })
	}
	return a
}

// stop ends the workers once they finished the batches queued.
func (a *ahead) stop() {
	close(a.jobs)
	a.wg.Wait()
}

// batch returns the batch being filled, starting one when there is none.
func (a *ahead) batch() *encodeBatch {
	if a.open != nil {
		return a.open
	}
	var b *encodeBatch
	if k := len(a.free); k > 0 {
		b, a.free = a.free[k-1], a.free[:k-1]
		clear(b.records)
		b.records = b.records[:0]
		b.n, b.handled, b.ready, b.takenBack = 0, 0, false, false
	} else {
		b = &encodeBatch{done: make(chan struct{}, 1)}
	}
	// A worker holding an old copy of b from the queue cannot take it while it is filled.
	b.state.Store(batchStream)
	a.open = b
	return b
}

// flush queues the batch being filled.
func (a *ahead) flush() {
	if b := a.open; b != nil {
		a.open = nil
		b.state.Store(batchQueued)
		a.jobs <- b
	}
}

// loopAhead is loop with encode workers (encoders.go's comment).
func (st *streamState) loopAhead(ctx context.Context, msgs <-chan []byte, out chan<- *change.Unit, workers int) error {
	st.ctx, st.out = ctx, out
	st.emitted = st.pos
	a := startAhead(workers)
	used, redone := st.preUsed, st.preRedone
	defer func() {
		a.stop()
		st.log.Info("encode workers stopped", "workers", workers,
			"changes_encoded_by_workers", st.preUsed-used, "changes_encoded_again", st.preRedone-redone)
	}()
	for {
		select {
		case <-st.s.ctrlSig:
			st.control()
			continue
		default:
		}
		if a.n <= aheadMessages/2 && !a.closed {
			st.pull(a, msgs)
		}
		if a.n > 0 {
			if err := st.handleAhead(a); err != nil {
				return err
			}
			continue
		}
		if a.closed {
			return ctx.Err()
		}
		// Yield point: nothing waiting. Publish progress and do pending releases.
		if err := st.yield(); err != nil {
			return err
		}
		select {
		case data, ok := <-msgs:
			st.push(a, data, ok)
			a.flush()
		case <-st.s.ctrlSig:
			st.control()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pull reads the messages waiting in msgs into the window, as far as it has room.
func (st *streamState) pull(a *ahead, msgs <-chan []byte) {
	defer a.flush()
	for a.n < aheadMessages {
		select {
		case data, ok := <-msgs:
			st.push(a, data, ok)
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// push adds a message read to the window (ok false: msgs is closed).
func (st *streamState) push(a *ahead, data []byte, ok bool) {
	if !ok {
		a.closed = true
		return
	}
	e := aheadEntry{data: data}
	st.foresee(a, &e)
	a.q[(a.head+a.n)%aheadMessages] = e
	a.n++
}

// foresee follows the transactions read ahead and hands each row change that will be encoded,
// as far as the state now tells, to a batch.
func (st *streamState) foresee(a *ahead, e *aheadEntry) {
	const hdr = 25 // XLogData header
	if len(e.data) <= hdr || e.data[0] != pglogrepl.XLogDataByteID {
		return
	}
	m := e.data[hdr:]
	switch m[0] {
	case 'B':
		if len(m) < 21 {
			a.inTx = false
			return
		}
		lsn := change.LSN(binary.BigEndian.Uint64(m[1:]))
		// pglogrepl's rendering of the commit time (microseconds since 2000-01-01).
		us := 946684800*1000000 + int64(binary.BigEndian.Uint64(m[9:]))
		a.src = codec.Source{LSN: lsn, Xid: binary.BigEndian.Uint32(m[17:]), Time: time.Unix(0, us*1000)}
		a.inTx = lsn >= st.resumeAt
	case 'C':
		a.inTx = false
	case 'T':
		a.foreseeTruncate(st, m)
	case 'R':
		if len(m) >= 5 {
			e.relation, e.relID = true, binary.BigEndian.Uint32(m[1:])
			p := a.relations[e.relID]
			p.n++
			p.export, p.ok = relationExport(m)
			a.relations[e.relID] = p
		}
	case 'I', 'U', 'D':
		st.foreseeChange(a, e, m)
	}
}

func (st *streamState) foreseeChange(a *ahead, e *aheadEntry, m []byte) {
	if !a.inTx {
		return
	}
	if len(m) < 6 {
		a.inTx = false
		return
	}
	rel, r, known := a.routed(st, binary.BigEndian.Uint32(m[1:]))
	if !known {
		// Whether the change counts in the sequence is not known: the rest of the
		// transaction is left to the stream goroutine.
		a.inTx = false
		return
	}
	if r == nil {
		return
	}
	// change counts the sequence of every routed change.
	a.src.Seq++
	if rel == nil || rel.enc == nil || !encodes(r, a.src.LSN) {
		return
	}
	b := a.batch()
	b.items[b.n] = encodeItem{data: m, enc: rel.enc, src: a.src, ncols: rel.ncols}
	e.batch, e.item = b, b.n
	b.n++
	if b.n == batchChanges {
		a.flush()
	}
}

// routed tells the route of a change of relation relID read ahead (nil: not routed, it does
// not count in the sequence), as far as known; rel is its relation, nil when a Relation message
// read ahead will replace it (its encoder is not known yet).
func (a *ahead) routed(st *streamState, relID uint32) (rel *relation, r *route, known bool) {
	if len(a.relations) > 0 {
		if p, ok := a.relations[relID]; ok {
			return nil, st.routes[p.export], p.ok
		}
	}
	rel = st.rels[relID]
	if rel == nil {
		return nil, nil, false
	}
	return rel, st.routes[rel.export], true
}

// foreseeTruncate counts the routed relations of a Truncate message read ahead in the sequence.
func (a *ahead) foreseeTruncate(st *streamState, m []byte) {
	if !a.inTx {
		return
	}
	if len(m) < 6 || len(m) != 6+4*int(binary.BigEndian.Uint32(m[1:])) {
		a.inTx = false
		return
	}
	for i := 6; i < len(m); i += 4 {
		_, r, known := a.routed(st, binary.BigEndian.Uint32(m[i:]))
		if !known {
			a.inTx = false
			return
		}
		if r != nil {
			a.src.Seq++
		}
	}
}

// relationExport reads the export a Relation message names.
func relationExport(m []byte) (change.ExportID, bool) {
	rest := m[5:]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return change.ExportID{}, false
	}
	j := bytes.IndexByte(rest[i+1:], 0)
	if j < 0 {
		return change.ExportID{}, false
	}
	return change.ExportID{Schema: string(rest[:i]), Table: string(rest[i+1 : i+1+j])}, true
}

// encodes reports whether change encodes a change of route r in a transaction committing at
// commit (it publishes or holds it).
func encodes(r *route, commit change.LSN) bool {
	switch r.mode {
	case routeDirect, routeDrain, routeMerge:
		return commit >= r.replayBelow
	case routeHold, routeRelease:
		return !r.hasC || commit >= r.c
	}
	return false
}

// handleAhead handles the first message of the window.
func (st *streamState) handleAhead(a *ahead) error {
	e := a.q[a.head]
	a.q[a.head] = aheadEntry{}
	a.head = (a.head + 1) % aheadMessages
	a.n--
	if e.relation {
		if p := a.relations[e.relID]; p.n > 1 {
			p.n--
			a.relations[e.relID] = p
		} else {
			delete(a.relations, e.relID)
		}
	}
	b := e.batch
	if b == nil {
		return st.handle(e.data)
	}
	if !b.ready {
		b.ready = true
		if !st.waitWorkers && b.state.CompareAndSwap(batchQueued, batchStream) {
			b.takenBack = true
		} else {
			<-b.done
		}
	}
	defer func() {
		if b.handled++; b.handled == b.n {
			a.free = append(a.free, b)
		}
	}()
	it := &b.items[e.item]
	if b.takenBack || it.failed {
		return st.handle(e.data)
	}
	st.pre, st.preRecs = it, b.records[it.from:it.to]
	err := st.handle(e.data)
	st.pre, st.preRecs = nil, nil
	return err
}

// takePre is the encodeFunc of a row change a worker encoded (st.pre): its records, if the
// worker encoded it under the state the change meets, else the change encoded here.
func (st *streamState) takePre(enc *codec.Encoder, dst []change.Record, src codec.Source, n int) ([]change.Record, error) {
	it := st.pre
	if it.enc == enc && it.ncols == n && it.src.LSN == src.LSN && it.src.Xid == src.Xid &&
		it.src.Seq == src.Seq && it.src.Time.Equal(src.Time) && !src.Snapshot {
		st.preUsed++
		return append(dst, st.preRecs...), nil
	}
	st.preRedone++
	_, fn, err := st.rows.parse(it.data)
	if err != nil {
		return dst, err
	}
	return fn(enc, dst, src, n)
}

// encodeWorker encodes batches with its own row buffers and encoder clones.
type encodeWorker struct {
	rows   rowBuffers
	clones map[*codec.Encoder]*codec.Encoder
}

func (w *encodeWorker) run(jobs <-chan *encodeBatch) {
	for b := range jobs {
		// A batch the stream goroutine took back (or refills) is not this worker's.
		if !b.state.CompareAndSwap(batchQueued, batchWorker) {
			continue
		}
		w.encode(b)
		b.done <- struct{}{}
	}
}

func (w *encodeWorker) encode(b *encodeBatch) {
	for i := range b.items[:b.n] {
		it := &b.items[i]
		from := len(b.records)
		_, fn, err := w.rows.parse(it.data)
		if err == nil {
			b.records, err = fn(w.clone(it.enc), b.records, it.src, it.ncols)
		}
		if err != nil {
			b.records = b.records[:from]
		}
		it.from, it.to, it.failed = from, len(b.records), err != nil
	}
}

// clone returns the worker's clone of enc.
func (w *encodeWorker) clone(enc *codec.Encoder) *codec.Encoder {
	c := w.clones[enc]
	if c == nil {
		if len(w.clones) >= maxClones {
			clear(w.clones)
		}
		c = enc.Clone()
		w.clones[enc] = c
	}
	return c
}
