package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jackc/pglogrepl"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

type relation struct {
	export change.ExportID
	// enc is nil when the relation's records cannot be encoded (refused, the reason).
	enc     *codec.Encoder
	refused error
	ncols   int
	// keyed: the relation has key columns (its records have a key).
	keyed bool
}

// txn is the transaction being decoded.
type txn struct {
	open bool
	// replay: the transaction was handled on an earlier connection; only its Relation
	// messages count.
	replay  bool
	commit  change.LSN
	xid     uint32
	seq     int64
	src     codec.Source
	records []change.Record
	held    map[change.ExportID]*change.Unit
	// touched: keys changed by the transaction, of exports with open chunk windows.
	touched map[change.ExportID][][]byte
	// changes counts the transaction's change messages so far; the first skip of them were
	// handed over in pieces before a reconnect or a restart and are left out.
	changes int64
	skip    int64
	// bytes estimates the records held for the transaction (records and held units).
	bytes int
	// pieces is the number of pieces handed over; split: some of the transaction was handed
	// over in pieces, in this life or an earlier one (the rest follows as pieces too).
	pieces int
	split  bool
}

// maxRecHint bounds streamState.recHint.
const maxRecHint = 1024

// streamState is owned by the stream goroutine.
type streamState struct {
	s      *Stage
	log    *slog.Logger
	routes map[change.ExportID]*route
	// watch holds the exports whose route a yield point must look at (routeRelease,
	// routeDrain, routeMerge); it is added to when a route enters one of those modes and
	// pruned by yield, so a yield costs the copies in flight, not every export.
	watch map[change.ExportID]struct{}
	rels  map[uint32]*relation
	tx    txn
	// pos is the stream position S; emitted is the last position handed to the sink.
	pos     change.LSN
	emitted change.LSN
	out     chan<- *change.Unit
	ctx     context.Context
	// failed are KindFailed units of exports that failed in the open transaction.
	failed []*change.Unit
	// resumeAt is the stream position when the connection was last re-established:
	// transactions committing below it were handled on an earlier connection.
	resumeAt change.LSN
	// windows of chunked copies, by chunk id.
	windows map[uint64]*window
	// rows are the reusable buffers of the row-change fast path (fastpath.go).
	rows rowBuffers
	// pre is the row change being handled when an encode worker made its records (preRecs),
	// preFn the encodeFunc that takes them (encoders.go).
	pre     *encodeItem
	preRecs []change.Record
	preFn   encodeFunc
	// preUsed and preRedone count the row changes whose records a worker made, and those read
	// ahead under another state and encoded again here.
	preUsed, preRedone int64
	// waitWorkers (tests): never take a batch back from the workers, wait for them.
	waitWorkers bool
	// recHint is the capacity a transaction's record slice starts with: the records of the
	// last whole transaction, at most maxRecHint.
	recHint int
	// streamed: the xids of the last transactions delivered (streamed.go).
	streamed xidRing
	// replayed holds the records of a replayed change while its keys are noted (touchReplayed).
	replayed []change.Record
	// partial is the part of a transaction already handed over in pieces: when the server
	// sends that transaction again (after a reconnect, or a restart that found it partly
	// durable), its first partial.Changes changes are skipped.
	partial change.Partial
}

// reconnected prepares the state for a new connection that resumes at the stream position:
// the transaction that was open when the old one broke is discarded (the server sends it again,
// whole), and anything committing below the position is skipped if the server sends it again.
func (st *streamState) reconnected() {
	st.tx = txn{held: st.tx.held, touched: st.tx.touched}
	clear(st.tx.held)
	clear(st.tx.touched)
	st.resumeAt = st.pos
}

func newStreamState(s *Stage) *streamState {
	return &streamState{
		s:      s,
		log:    s.log,
		routes: make(map[change.ExportID]*route),
		watch:  make(map[change.ExportID]struct{}),
		rels:   make(map[uint32]*relation),
	}
}

func (st *streamState) close() {
	for _, r := range st.routes {
		if r.hold != nil {
			r.hold.Close()
		}
		st.dropWindows(r)
	}
}

// received handles a message taken from msgs. A closed msgs (ok false: the receiver stopped)
// ends the loop (done) with ctx's error, nil when ctx is not cancelled yet; the receiver's own
// error is what the group returns.
func (st *streamState) received(ctx context.Context, data []byte, ok bool) (done bool, err error) {
	if !ok {
		return true, ctx.Err()
	}
	return false, st.handle(data)
}

func (st *streamState) loop(ctx context.Context, msgs <-chan []byte, out chan<- *change.Unit) error {
	st.ctx, st.out = ctx, out
	st.emitted = st.pos
	for {
		// Control calls first (checking for none is cheap), then the next message; one
		// select over both would lock both channels for every message.
		select {
		case <-st.s.ctrlSig:
			st.control()
			continue
		default:
		}
		select {
		case data, ok := <-msgs:
			if done, err := st.received(ctx, data, ok); done || err != nil {
				return err
			}
			continue
		default:
		}
		// Yield point: nothing waiting. Publish progress and do pending releases.
		if err := st.yield(); err != nil {
			return err
		}
		select {
		case data, ok := <-msgs:
			if done, err := st.received(ctx, data, ok); done || err != nil {
				return err
			}
		case <-st.s.ctrlSig:
			st.control()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// control runs the queued control functions in order.
func (st *streamState) control() {
	for _, fn := range st.s.takeControl() {
		fn(st)
	}
}

// emit sends a unit to the sink, applying control calls while it waits (they only change
// routing state; releases happen at yield points).
func (st *streamState) emit(u *change.Unit) error {
	select {
	case st.out <- u:
		// The sink had room: no select over the control and context channels.
		if u.Kind == change.KindTxn || u.Kind == change.KindProgress {
			st.emitted = max(st.emitted, u.End)
		}
		return nil
	default:
	}
	for {
		select {
		case st.out <- u:
			if u.Kind == change.KindTxn || u.Kind == change.KindProgress {
				st.emitted = max(st.emitted, u.End)
			}
			return nil
		case <-st.s.ctrlSig:
			st.control()
		case <-st.ctx.Done():
			return st.ctx.Err()
		}
	}
}

func (st *streamState) yield() error {
	if st.tx.open {
		return nil
	}
	for e := range st.watch {
		r, ok := st.routes[e]
		if !ok {
			delete(st.watch, e)
			continue
		}
		switch r.mode {
		case routeRelease:
			if st.pos >= r.c {
				if err := st.release(e, r); err != nil {
					return err
				}
			}
		case routeDrain:
			if st.pos >= r.removeAt {
				r.mode = routeDrop
				if err := st.emit(&change.Unit{Kind: change.KindRemoved, Export: e, End: st.pos}); err != nil {
					return err
				}
			}
		case routeMerge:
			// A chunked copy whose last chunk was published before CopyComplete arrived.
			if r.chunks != nil && r.chunks.total >= 0 && r.chunks.next >= r.chunks.total {
				if err := st.publishChunks(e, r); err != nil {
					return err
				}
			}
		default:
			delete(st.watch, e)
		}
	}
	if st.partial.Changes > 0 && st.pos > st.partial.Commit {
		// The stream passed a transaction restored as partly published without the server
		// sending it again (none of its changes are published any more, so pgoutput skips it
		// as empty): what was published of it is all there is. Close it, or the watermarks
		// would wait for it for ever.
		p := st.partial
		st.partial = change.Partial{}
		st.log.Warn("transaction published in part was not sent again; closing it", "commit_lsn", p.Commit.String(), "changes_published", p.Changes)
		return st.emit(&change.Unit{Kind: change.KindTxn, Commit: p.Commit, End: st.pos,
			Piece: &change.Piece{Last: true, Changes: p.Changes}})
	}
	if st.pos > st.emitted {
		return st.emit(&change.Unit{Kind: change.KindProgress, End: st.pos})
	}
	return nil
}

func (st *streamState) release(e change.ExportID, r *route) error {
	n := r.hold.Len()
	err := r.hold.Drain(func(u *change.Unit) error { return st.emit(u) })
	if err != nil {
		return fmt.Errorf("release hold buffer of %s: %w", e, err)
	}
	r.hold = nil
	r.mode = routeDirect
	st.s.hydrated.NoteTo(st.log, e.String(), "export", e.String(), "held_transactions", n, "stream_lsn", st.pos.String())
	return st.emit(&change.Unit{Kind: change.KindHydrated, Export: e, End: st.pos})
}

func (st *streamState) handle(data []byte) error {
	if len(data) == 0 {
		return errors.New("empty replication message")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parse keepalive: %w", err)
		}
		// Idle progress: only while no transaction is open.
		if !st.tx.open {
			st.pos = max(st.pos, change.LSN(ka.ServerWALEnd))
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse xlogdata: %w", err)
		}
		if handled, err := st.fastChange(xld.WALData); handled {
			return err
		}
		msg, err := parseMessage(xld.WALData)
		if err != nil {
			return fmt.Errorf("parse pgoutput message: %w", err)
		}
		return st.message(msg)
	}
	return nil
}

func (st *streamState) message(msg pglogrepl.Message) error {
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		st.tx = txn{open: true, commit: change.LSN(m.FinalLSN), xid: m.Xid, held: st.tx.held, touched: st.tx.touched, replay: change.LSN(m.FinalLSN) < st.resumeAt}
		clear(st.tx.held)
		clear(st.tx.touched)
		if st.partial.Changes > 0 && st.partial.Commit == st.tx.commit && !st.tx.replay {
			st.tx.skip, st.tx.split = st.partial.Changes, true
		}
		st.tx.src = codec.Source{LSN: change.LSN(m.FinalLSN), Xid: m.Xid, Time: m.CommitTime}
	case *pglogrepl.CommitMessage:
		return st.commit(m)
	case *pglogrepl.LogicalDecodingMessage:
		return st.marker(m)
	case *pglogrepl.RelationMessage:
		return st.relation(m)
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			err := st.change(id, func(enc *codec.Encoder, dst []change.Record, src codec.Source, _ int) ([]change.Record, error) {
				return enc.Truncate(dst, src)
			})
			if err != nil {
				return err
			}
		}
	}
	// Type and Origin messages need nothing: values arrive as text.
	return nil
}

func (st *streamState) relation(m *pglogrepl.RelationMessage) error {
	e := change.ExportID{Schema: m.Namespace, Table: m.RelationName}
	t := &change.Table{Export: e, OID: m.RelationID}
	for _, c := range m.Columns {
		t.Columns = append(t.Columns, change.Column{Name: c.Name, TypeOID: c.DataType, TypeMod: c.TypeModifier, Key: c.Flags&1 == 1})
	}
	switch m.ReplicaIdentity {
	case 'n':
		for i := range t.Columns {
			t.Columns[i].Key = false
		}
	case 'f':
		// FULL marks every column; the record key is the primary key, as in the snapshot.
		keys, err := st.s.keys.KeyColumns(st.ctx, e)
		if err != nil {
			return fmt.Errorf("key columns of %s: %w", e, err)
		}
		for i := range t.Columns {
			t.Columns[i].Key = false
			for _, k := range keys {
				if t.Columns[i].Name == k {
					t.Columns[i].Key = true
				}
			}
		}
	}
	if err := st.s.cfg.Codec.Prepare(st.ctx, t); errors.Is(err, codec.ErrSchemaRefused) {
		// The schema registry refused the table's new shape: its export stops alone, the
		// others go on.
		err = fmt.Errorf("encoder for %s at %s: %w", e, st.tx.commit, err)
		st.rels[m.RelationID] = &relation{export: e, ncols: len(t.Columns), refused: err}
		if r, ok := st.routes[e]; ok && r.mode != routeDrop {
			st.failExport(e, change.TopicName(st.s.cfg.Codec.TopicPrefix, e), err)
		}
		return nil
	} else if err != nil {
		return &prepareError{fmt.Errorf("encoder for %s: %w", e, err)}
	}
	enc, err := codec.NewEncoder(st.s.cfg.Codec, t)
	if err != nil {
		return fmt.Errorf("encoder for %s: %w", e, err)
	}
	keyed := slices.ContainsFunc(t.Columns, func(c change.Column) bool { return c.Key })
	prev := st.rels[m.RelationID]
	st.rels[m.RelationID] = &relation{export: e, enc: enc, ncols: len(t.Columns), keyed: keyed}
	r, ok := st.routes[e]
	if !ok {
		st.s.report(Fact{Kind: FactUnknownRelation, Export: e})
		return nil
	}
	if prev != nil && prev.export == e && prev.keyed && !keyed && r.mode != routeDrop {
		// The export's records are keyed and its topic compacted: records without a key would
		// be refused by Kafka, and keys of the old identity would never be deleted. It stops
		// alone; the others go on.
		st.failExport(e, prev.enc.Topic(), fmt.Errorf("%s lost its key at %s: it has no primary key or replica identity index any more (replica identity %s); add one, then restart the service to copy the table again",
			e, st.tx.commit, identityName(m.ReplicaIdentity)))
	}
	return nil
}

// identityName renders a pgoutput replica identity setting as ALTER TABLE spells it.
func identityName(ri uint8) string {
	switch ri {
	case 'd':
		return "DEFAULT"
	case 'n':
		return "NOTHING"
	case 'f':
		return "FULL"
	case 'i':
		return "USING INDEX"
	}
	return string(rune(ri))
}

type encodeFunc func(enc *codec.Encoder, dst []change.Record, src codec.Source, ncols int) ([]change.Record, error)

// change routes one row change of the open transaction.
func (st *streamState) change(relID uint32, encode encodeFunc) error {
	rel, ok := st.rels[relID]
	if !ok {
		return fmt.Errorf("change for relation %d before its Relation message", relID)
	}
	if st.tx.replay {
		return nil
	}
	// Every change message counts, routed or not: the count is the same whenever the server
	// sends the transaction, whatever the routes are.
	st.tx.changes++
	r, ok := st.routes[rel.export]
	if !ok {
		return nil
	}
	st.tx.seq++
	if st.tx.changes <= st.tx.skip {
		// Handed over in an earlier piece; its keys reached the chunk windows then.
		return nil
	}
	if rel.enc == nil {
		if r.mode != routeDrop {
			st.failExport(rel.export, change.TopicName(st.s.cfg.Codec.TopicPrefix, rel.export), rel.refused)
		}
		return nil
	}
	src := st.tx.src
	src.Seq = st.tx.seq
	var err error
	switch r.mode {
	case routeDirect, routeDrain, routeMerge:
		if st.tx.commit < r.replayBelow {
			if r.chunks != nil {
				st.touchReplayed(rel, r, encode, src)
			}
			return nil
		}
		if st.tx.records == nil && st.recHint > 0 {
			// Sized like the last transaction's: no growth for a workload of similar ones.
			st.tx.records = make([]change.Record, 0, st.recHint)
		}
		n := len(st.tx.records)
		st.tx.records, err = encode(rel.enc, st.tx.records, src, rel.ncols)
		if err == nil {
			for i := n; i < len(st.tx.records); i++ {
				st.tx.bytes += st.tx.records[i].Size()
			}
			if r.chunks != nil {
				st.touch(rel.export, r, st.tx.records[n:])
			}
		}
	case routeHold, routeRelease:
		if r.hasC && st.tx.commit < r.c {
			return nil
		}
		if st.tx.held == nil {
			st.tx.held = make(map[change.ExportID]*change.Unit)
		}
		u := st.tx.held[rel.export]
		if u == nil {
			u = &change.Unit{Kind: change.KindHeld, Export: rel.export, Commit: st.tx.commit, Xid: st.tx.xid, Time: st.tx.src.Time}
			st.tx.held[rel.export] = u
		}
		n := len(u.Records)
		u.Records, err = encode(rel.enc, u.Records, src, rel.ncols)
		if err == nil {
			for i := n; i < len(u.Records); i++ {
				st.tx.bytes += u.Records[i].Size()
			}
		}
	}
	if err != nil {
		// A change that cannot be encoded (a record above the size limit, a value that does
		// not parse) stops its export alone; the transaction goes on without it.
		st.failExport(rel.export, rel.enc.Topic(), fmt.Errorf("encode change of %s at %s: %w", rel.export, st.tx.commit, err))
		return nil
	}
	if st.tx.bytes >= st.s.cfg.PieceBytes {
		return st.cutPiece()
	}
	return nil
}

// cutPiece hands over what the open transaction holds so far, because it passed the piece
// bound: its records as one piece to the sink, its held changes to their hold buffers. Without
// streaming, pgoutput sends a transaction only once it has committed, so what arrived of it
// may be published before its Commit message. The piece takes its bytes from the stage's
// in-flight budget until the sink made it durable: the records of a transaction in memory stay
// bounded by PiecesInFlight pieces, whatever its size.
func (st *streamState) cutPiece() error {
	st.noteKeys()
	if err := st.holdTx(0); err != nil {
		return err
	}
	if len(st.tx.records) > 0 {
		u := &change.Unit{
			Kind: change.KindTxn, Commit: st.tx.commit, Xid: st.tx.xid, Time: st.tx.src.Time,
			Records: st.tx.records,
			Piece:   &change.Piece{Index: st.tx.pieces, Changes: st.tx.changes},
		}
		st.tx.records = nil
		if err := st.emitTxn(u, st.tx.bytes); err != nil {
			return err
		}
		if st.tx.pieces == 0 {
			st.log.Info("large transaction: publishing it in pieces", "commit_lsn", st.tx.commit.String(), "xid", st.tx.xid, "piece_bytes", st.s.cfg.PieceBytes)
		}
		st.tx.pieces++
		st.tx.split = true
	}
	st.tx.bytes = 0
	// Transactions arrive in commit order: one before a restored partial one leaves it alone.
	if st.tx.commit >= st.partial.Commit {
		st.partial = change.Partial{Commit: st.tx.commit, Changes: st.tx.changes}
	}
	return nil
}

// emitTxn emits a transaction or a piece of n bytes once they fit in the in-flight budget,
// applying control calls meanwhile; the sink gives them back once the unit is durable.
func (st *streamState) emitTxn(u *change.Unit, n int) error {
	for {
		if u.Claim = st.s.inFlight.Take(int64(n)); u.Claim != nil {
			break
		}
		select {
		case <-st.s.inFlight.Freed():
		case <-st.s.ctrlSig:
			st.control()
		case <-st.ctx.Done():
			return st.ctx.Err()
		}
	}
	return st.emit(u)
}

// holdTx adds the open transaction's held changes to their exports' hold buffers; end is the
// transaction's end LSN, or 0 for a piece cut before its Commit.
func (st *streamState) holdTx(end change.LSN) error {
	for e, u := range st.tx.held {
		u.End = end
		r := st.routes[e]
		if r == nil || r.hold == nil || (r.hasC && u.Commit < r.c) {
			continue
		}
		if err := r.hold.Add(u); err != nil {
			return fmt.Errorf("hold change of %s: %w", e, err)
		}
	}
	clear(st.tx.held)
	return nil
}

// failExport drops e's records from the open transaction, stops routing it and queues its
// KindFailed unit, emitted after the transaction.
func (st *streamState) failExport(e change.ExportID, topic string, err error) {
	st.log.Error("export failed", "export", e.String(), "err", err)
	kept := st.tx.records[:0]
	for _, r := range st.tx.records {
		if r.Topic != topic {
			kept = append(kept, r)
		}
	}
	st.tx.records = kept
	delete(st.tx.held, e)
	delete(st.tx.touched, e)
	st.fail(e)
	st.failed = append(st.failed, &change.Unit{Kind: change.KindFailed, Export: e, Err: err.Error(), Cause: err})
}

func (st *streamState) commit(m *pglogrepl.CommitMessage) error {
	end := change.LSN(m.TransactionEndLSN)
	if err := st.holdTx(end); err != nil {
		return err
	}
	st.noteKeys()
	tx := st.tx
	st.tx = txn{held: st.tx.held, touched: st.tx.touched}
	st.streamed.add(tx.xid)
	// Register the transaction's records with the sink before the position passes its end.
	u := &change.Unit{
		Kind: change.KindTxn, Commit: change.LSN(m.CommitLSN), End: end,
		Xid: tx.xid, Time: m.CommitTime, Records: tx.records,
	}
	switch {
	case tx.split:
		// The last piece, even an empty one: it completes the transaction.
		u.Piece = &change.Piece{Index: tx.pieces, Last: true, Changes: tx.changes}
		if err := st.emitTxn(u, tx.bytes); err != nil {
			return err
		}
		if tx.pieces > 0 {
			st.log.Info("large transaction handed over", "commit_lsn", u.Commit.String(), "xid", tx.xid, "pieces", tx.pieces+1, "changes", tx.changes)
		}
	case len(tx.records) > 0:
		st.recHint = min(len(tx.records), maxRecHint)
		if err := st.emitTxn(u, tx.bytes); err != nil {
			return err
		}
	}
	if st.partial.Commit == tx.commit {
		st.partial = change.Partial{}
	}
	st.pos = max(st.pos, end)
	for _, u := range st.failed {
		u.End = st.pos
		if err := st.emit(u); err != nil {
			return err
		}
	}
	st.failed = st.failed[:0]
	return nil
}
