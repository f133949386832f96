package watermark

import (
	"maps"
	"slices"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// DefaultInterval is the heartbeat interval when Options.Interval is not set.
const DefaultInterval = time.Second

// Options configures a Tracker. The zero value is independent mode with DefaultInterval.
type Options struct {
	// Mode is ModeIndependent (also for "") or ModeGlobal; any other value means independent,
	// so validate it with ParseMode first.
	Mode Mode
	// Interval is CDC_WATERMARK_INTERVAL: every live export gets a record at least this often,
	// and at most one record per Interval/4 for a moving watermark. Default 1s.
	Interval time.Duration
}

// Tracker keeps the frontier of every export and decides what each watermark record says and
// what the replication slot may confirm. It is synchronous and not safe for concurrent use:
// the pipeline's owner goroutine is its only user.
//
// The tracker keeps no lifecycle state of its own: an export's state is the one its owner last
// set (SetState, an explicit transition the owner makes; the tracker never calls back), and what the tracker keeps of an export is history (positions, the snapshot
// attempt, what its records said and which of them are durable). Its transition methods
// (StartHydration, StartChunked, Holding, Hydrated, Removed, Failed) record what a transition
// does to that history. Call each one while the export is still in the state it leaves, and
// only for a transition the owner's lifecycle allows: the tracker does not judge them.
type Tracker struct {
	mode     Mode
	interval time.Duration
	// owned is the state the owner last set for each export it took up (SetState).
	owned map[change.ExportID]State

	exports map[change.ExportID]*export
	order   []*export // in order of first appearance: Due and Status are deterministic
	// byName is order sorted by name, for Status; nil when an export was added since.
	byName []*export

	// sd is the durable stream position S_d: every change of every hydrated export with commit
	// LSN below it is durable. A hydrated export's own position is max(its pos, sd).
	sd    change.LSN
	hasSD bool

	// globalW is the last global watermark (global mode): it only moves when no live export is
	// hydrating, and never backwards.
	globalW *change.LSN

	// confirmed is the highest value Confirmable returned: it never returns less.
	confirmed    change.LSN
	hasConfirmed bool

	// pending are the exports with records returned by Due and not yet Published.
	pending []*export

	// Checkpoints: cpDurable is the position of the last durable checkpoint (a restart resumes
	// every export restored hydrated at or above it), cpPending the one in flight, cpReturned
	// the highest one Checkpoint returned.
	cpDurable    change.LSN
	cpPending    change.LSN
	hasCPPending bool
	cpReturned   change.LSN
}

// export is what the tracker keeps of one export: history, not a lifecycle state (Tracker.state).
type export struct {
	id    change.ExportID
	topic string
	// name is id.String(), made once (Status sorts by it).
	name string
	// restored: known only from the watermark topic (or from a life that ended: Holding), with
	// no attempt in this process yet. Such an export gets no records and does not count
	// anywhere until StartHydration (or Removed, or Failed).
	restored bool
	// earlier, when hasEarlier: per partition, where e's topic holds rows of unfinished
	// attempts or of an earlier life (absent partition: the beginning) that the next copy must
	// reconcile; unset: none before the next attempt's own start.
	earlier    map[int32]int64
	hasEarlier bool

	// pos is the own position P(e) when hasPos: set when hydrated (and frozen by removal or
	// failure). While hydrated the effective position is max(pos, Tracker.sd).
	pos    change.LSN
	hasPos bool

	snap *SnapshotInfo // the current or last attempt; nil before the first
	err  string

	// Publication: what the records returned by Due said.
	published *change.LSN // the highest watermark ever published (never regresses)
	hasRecord bool        // a record was returned (or restored)
	lastW     *change.LSN // watermark of the last record
	lastPos   change.LSN  // position of the last record
	lastAt    time.Time   // time of the last record
	owed      bool        // a state transition waits for its record
	// lastState and lastOffsets are the state and offsets of the last record. quiet (set by
	// Due) says the export is hydrated and its topic holds nothing its last record does not
	// cover: the quiet record speaks for it instead of a record of its own.
	lastState   State // history: what the last record said (see Tracker.state)
	lastOffsets map[int32]int64
	quiet       bool

	// Durability: the last record known durable, and the records in flight. A record
	// "streams" when it says hydrated or copying in chunks: after a crash the export resumes
	// following the stream from its position, so that position pins WAL.
	durable        bool
	durableStreams bool
	durablePos     change.LSN
	hasPending     bool // a record is in flight (returned by Due, not yet Published)
	pendingStreams bool
	pendingPos     change.LSN
	hasPendingHyd  bool
	pendingHydMin  change.LSN // lowest position of an in-flight record that streams

	// Copy progress in this process: when the current attempt's first rows of this life became
	// durable, and how many since (rate and ETA of the records).
	lifeStart time.Time
	lifeRows  int64
}

// state is x's state now: the one its owner set (SetState). An export the owner has not taken up
// has none of its own: it is what its last record said.
func (t *Tracker) state(x *export) State {
	if s, ok := t.owned[x.id]; ok {
		return s
	}
	return x.lastState
}

// streams reports whether x's changes flow directly to its topic, so that x has an own position
// that follows the stream: hydrated, or hydrating by a chunked copy.
func (t *Tracker) streams(x *export) bool {
	return streams(t.state(x), x.snap)
}

func streams(s State, snap *SnapshotInfo) bool {
	return s == StateHydrated || s == StateHydrating && snap != nil && snap.Strategy == StrategyChunked
}

// NewTracker returns an empty tracker.
func NewTracker(opts Options) *Tracker {
	mode := ModeIndependent
	if opts.Mode == ModeGlobal {
		mode = ModeGlobal
	}
	interval := opts.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Tracker{mode: mode, interval: interval, exports: make(map[change.ExportID]*export), owned: make(map[change.ExportID]State)}
}

// Mode returns the tracker's watermark mode.
func (t *Tracker) Mode() Mode { return t.mode }

// SetState is a transition of e's life, made by its owner: e's records say s from now on. The
// owner calls it after the transition method that records what the transition does to e's
// history (StartHydration, Hydrated, …), which it calls while e is still in the state it
// leaves. Until the first SetState of e, e keeps the state of its last record.
func (t *Tracker) SetState(e change.ExportID, s State) { t.owned[e] = s }

// get returns e's state, creating it if unknown.
func (t *Tracker) get(e change.ExportID) *export {
	x, ok := t.exports[e]
	if !ok {
		x = &export{id: e, name: e.String()}
		t.exports[e] = x
		t.order = append(t.order, x)
		t.byName = nil
	}
	return x
}

// position returns x's own position P(e), if it has one.
func (t *Tracker) position(x *export) (change.LSN, bool) {
	if !x.hasPos {
		return 0, false
	}
	if t.streams(x) && t.hasSD {
		return max(x.pos, t.sd), true
	}
	return x.pos, true
}

// freeze pins x's own position at its current effective value (x leaves the hydrated state).
func (t *Tracker) freeze(x *export) {
	x.pos, x.hasPos = t.position(x)
}

// Restore loads the watermark records read from the watermark topic at start-up, in any order
// and possibly several per export: the last one of each export in slice order counts. Call it
// once, before anything else. A hydrated export resumes hydrated with P(e) = its Position and
// its Watermark as last published. Any other export is remembered only for its attempt number,
// topic and last watermark (which it will never publish less than): it gets no records and
// counts nowhere until StartHydration (or Removed, or Failed) is called for it.
func (t *Tracker) Restore(recs []Record) {
	last := make(map[change.ExportID]int, len(recs))
	for i, r := range recs {
		last[r.Export] = i
	}
	var minW *change.LSN // lowest watermark of a restored hydrated export
	allHaveW := true
	for i, r := range recs {
		if last[r.Export] != i {
			continue
		}
		x := t.get(r.Export)
		x.topic = r.Topic
		x.snap = r.Snapshot.clone()
		// A chunked copy resumes where it stopped; any other hydrating export starts over.
		follows := streams(r.State, x.snap)
		x.restored = !follows
		x.err = r.Error
		x.published = maxLSN(x.published, r.Watermark)
		x.hasRecord, x.lastW, x.lastPos, x.lastAt = true, cloneLSN(r.Watermark), r.Position, r.Time
		x.lastState, x.lastOffsets = r.State, maps.Clone(r.Offsets)
		x.durable, x.durableStreams, x.durablePos = true, follows, r.Position
		x.owed = false
		// A removed or failed export keeps the position it had when it stopped (0/0 if it was
		// never hydrated); a hydrating one has none, unless it copies in chunks.
		x.pos, x.hasPos = r.Position, follows || (r.State != StateHydrating && r.Position != 0)
		// What its next copy reconciles: the rows of the unfinished attempts (a copy that never
		// finished, or failed before it was hydrated), or the whole topic after a removal.
		switch {
		case x.snap != nil && (r.State == StateHydrating || r.State == StateFailed && !x.hasPos):
			x.earlier, x.hasEarlier = maps.Clone(x.snap.ReconcileFrom), true
		case r.State == StateRemoved:
			x.earlier, x.hasEarlier = map[int32]int64{}, true
		default:
			x.earlier, x.hasEarlier = nil, false
		}
		if r.State == StateHydrated {
			if r.Watermark == nil {
				allHaveW = false
			} else if minW == nil || *r.Watermark < *minW {
				minW = cloneLSN(r.Watermark)
			}
		}
	}
	// The last global watermark: the lowest one of the hydrated exports (in global mode they all
	// published it, unless one holds a higher value from earlier).
	if allHaveW {
		t.globalW = maxLSN(t.globalW, minW)
	}
}

// Resume returns each export whose changes follow the stream (hydrated, or copying in chunks)
// with its own position: the replay filter of the replication stage (changes in transactions
// ending at or below it are not published again). Right after Restore these are the restored
// hydrated exports and the chunked copies to resume.
func (t *Tracker) Resume() map[change.ExportID]change.LSN {
	out := make(map[change.ExportID]change.LSN)
	for _, x := range t.order {
		if t.streams(x) {
			p, _ := t.position(x)
			out[x.id] = p
		}
	}
	return out
}

// StartHydration records the start of snapshot attempt of e with consistent point c, whatever
// e's history, and returns the attempt number (the previous attempt's plus one, from 1). topic
// is e's topic, estimatedRows the expected row count, startOffsets the end offsets of topic per
// partition at the start of the attempt. e is hydrating from now on: it has no own position
// and, in independent mode, publishes no new watermark until Hydrated.
func (t *Tracker) StartHydration(e change.ExportID, topic string, c change.LSN, estimatedRows int64, startOffsets map[int32]int64, now time.Time) int {
	x := t.get(e)
	attempt := 1
	// Rows of earlier attempts that never finished, or of an earlier life, are still to be
	// reconciled; otherwise only the topic's rows from this attempt's start on count.
	reconcile := maps.Clone(startOffsets)
	if x.hasEarlier {
		reconcile = maps.Clone(x.earlier)
	}
	if x.snap != nil {
		attempt = x.snap.Attempt + 1
	}
	x.earlier, x.hasEarlier = maps.Clone(reconcile), true // unfinished until Hydrated
	x.topic = topic
	x.restored = false
	x.pos, x.hasPos = 0, false
	x.err = ""
	x.snap = &SnapshotInfo{
		Attempt:         attempt,
		Strategy:        StrategyCopy,
		ConsistentPoint: c,
		RowsEstimated:   estimatedRows,
		StartedAt:       now.UTC(),
		StartOffsets:    maps.Clone(startOffsets),
		ReconcileFrom:   reconcile,
	}
	x.lifeStart, x.lifeRows = time.Time{}, 0
	x.owed = true
	return attempt
}

// CanChunk reports whether e may be copied by a chunked copy: it is new, hydrated (a re-copy),
// or copying in chunks already. A chunked copy reconciles nothing, so an export whose topic
// holds rows of an unfinished copy or of an earlier life (removed, failed) takes a copy that
// does (StartHydration).
func (t *Tracker) CanChunk(e change.ExportID) bool {
	x, ok := t.exports[e]
	return !ok || t.streams(x)
}

// StartChunked records the start of a chunked copy of e (a new attempt) and returns its attempt
// number. e's changes flow to its topic from now on: it keeps (or gets) an own position that
// follows the stream and pins WAL like a hydrated export's, but publishes no watermark until
// ChunkDone reports its last chunk and Hydrated follows. Call it only when CanChunk(e).
func (t *Tracker) StartChunked(e change.ExportID, topic string, estimatedRows int64, startOffsets map[int32]int64, now time.Time) int {
	x := t.get(e)
	attempt := 1
	if x.snap != nil {
		attempt = x.snap.Attempt + 1
	}
	if t.streams(x) && !x.restored {
		t.freeze(x) // a re-copy keeps the position it reached
	} else {
		x.pos = 0
	}
	x.hasPos = true
	x.topic = topic
	x.restored = false
	x.earlier, x.hasEarlier = maps.Clone(startOffsets), true
	x.err = ""
	x.snap = &SnapshotInfo{
		Attempt:       attempt,
		Strategy:      StrategyChunked,
		RowsEstimated: estimatedRows,
		StartedAt:     now.UTC(),
		StartOffsets:  maps.Clone(startOffsets),
		ReconcileFrom: maps.Clone(startOffsets),
	}
	x.lifeStart, x.lifeRows = time.Time{}, 0
	x.owed = true
	return attempt
}

// SetCopiedAs records, in e's current snapshot attempt, the publication's column list and row
// filter the attempt copies (nil: every column and row). Call it after StartHydration or
// StartChunked; ignored when e has no attempt.
func (t *Tracker) SetCopiedAs(e change.ExportID, p *PublishedInfo) {
	x, ok := t.exports[e]
	if !ok || x.snap == nil {
		return
	}
	if p != nil {
		c := *p
		c.Columns = slices.Clone(p.Columns)
		p = &c
	}
	x.snap.Publication = p
}

// CopiedAs returns the column list and row filter e's last snapshot attempt copied (nil: every
// column and row; also for records written before it was recorded, whose copies read every
// column and row); ok is false when e has no attempt.
func (t *Tracker) CopiedAs(e change.ExportID) (p *PublishedInfo, ok bool) {
	x, found := t.exports[e]
	if !found || x.snap == nil {
		return nil, false
	}
	return x.snap.Publication, true
}

// Chunked returns the progress of e's chunked copy: its attempt and the key after which the
// copy goes on (nil: from the first key); ok is false unless e is copying in chunks.
func (t *Tracker) Chunked(e change.ExportID) (attempt int, resumeAfter []string, ok bool) {
	x := t.hydrating(e)
	if x == nil || !t.streams(x) {
		return 0, nil, false
	}
	return x.snap.Attempt, x.snap.ResumeAfter, true
}

// ChunkDone records that chunk c of e's chunked copy is durable, with the rows it read. Chunks
// become durable in key order, so the copy resumes after c's range from now on. The record
// that says so is due at once: in exactly-once mode it commits with the chunk's rows. Ignored
// unless e is copying in chunks.
func (t *Tracker) ChunkDone(e change.ExportID, c *change.Chunk, now time.Time) {
	x := t.hydrating(e)
	if x == nil || !t.streams(x) {
		return
	}
	x.snap.ChunksDone++
	x.snap.RowsCopied += int64(c.Read)
	if c.Estimated > 0 {
		x.snap.RowsEstimated = c.Estimated
	}
	x.snap.ResumeAfter = c.Range.To
	t.countRows(x, int64(c.Read), now)
	if c.Last() && x.snap.FinishedAt == nil {
		f := now.UTC()
		x.snap.FinishedAt = &f
	}
	x.owed = true
}

// countRows adds rows to x's progress in this process.
func (t *Tracker) countRows(x *export, rows int64, now time.Time) {
	if x.lifeStart.IsZero() {
		x.lifeStart = now
	}
	x.lifeRows += rows
}

// Holding records that the replication stage holds e's changes back from now on, before e's
// new snapshot has a consistent point: e is hydrating (by a copy) from now on. StartHydration
// follows.
//
// One that followed the stream (hydrated, added to the publication again before its removal
// took effect, or copied again) stops following it at once, and its record says so in the next
// transaction, so neither a watermark nor a checkpoint passes changes that are held. Its topic
// is reconciled from the beginning, as for any export added again. One whose life ended
// (removed, failed) waits for its copy as a restored export does: no records, counted nowhere,
// until StartHydration.
func (t *Tracker) Holding(e change.ExportID) {
	x, ok := t.exports[e]
	if !ok || x.restored {
		return
	}
	if !t.streams(x) {
		if !t.state(x).live() {
			x.restored = true
		}
		return
	}
	x.pos, x.hasPos = 0, false
	if x.snap == nil {
		x.snap = &SnapshotInfo{}
	}
	x.snap.Strategy = StrategyCopy
	x.snap.ReconcileFrom = map[int32]int64{}
	x.earlier, x.hasEarlier = map[int32]int64{}, true
	x.owed = true
}

// hydrating returns e's state if e is hydrating (and not merely restored).
func (t *Tracker) hydrating(e change.ExportID) *export {
	x, ok := t.exports[e]
	if !ok || x.restored || t.state(x) != StateHydrating {
		return nil
	}
	return x
}

// SnapshotRows adds rows made durable by e's current attempt. Ignored unless e is hydrating.
func (t *Tracker) SnapshotRows(e change.ExportID, rows int64) {
	if x := t.hydrating(e); x != nil {
		x.snap.RowsCopied += rows
		t.countRows(x, rows, time.Now())
	}
}

// SnapshotCopied records that e's whole copy is durable. Ignored unless e is hydrating.
func (t *Tracker) SnapshotCopied(e change.ExportID, now time.Time) {
	if x := t.hydrating(e); x != nil && x.snap.FinishedAt == nil {
		f := now.UTC()
		x.snap.FinishedAt = &f
		x.owed = true
	}
}

// Hydrated records that e's copy and held changes are durable and that e's changes flow
// directly from stream position at on: e is hydrated with P(e) = max(P(e), at). For a hydrated
// export it only raises P(e); for one neither hydrating nor hydrated it does nothing.
//
// at is at or above e's consistent point, which is a WAL position taken after everything the
// slot was ever confirmed to: so a new hydrated export never lowers what Confirmable returned.
func (t *Tracker) Hydrated(e change.ExportID, at change.LSN) {
	x, ok := t.exports[e]
	if !ok || x.restored {
		return
	}
	switch t.state(x) {
	case StateHydrating:
		if t.streams(x) { // a chunked copy: the position it reached, or more
			t.freeze(x)
			at = max(at, x.pos)
		}
		x.pos, x.hasPos = at, true
		x.earlier, x.hasEarlier = nil, false
		x.owed = true
	case StateHydrated:
		x.pos = max(x.pos, at)
	}
}

// Advance moves the durable stream position S_d to durable: every change of every hydrated
// export with commit LSN below it is durable, so their own positions follow it. S_d never
// moves backwards; a lower value is ignored.
func (t *Tracker) Advance(durable change.LSN) {
	if !t.hasSD || durable > t.sd {
		t.sd, t.hasSD = durable, true
	}
}

// Removed records that e left the publication and that the stream passed at, the position at
// which that was noticed: a hydrated e ends with P(e) = max(P(e), at). e gets one final record
// with state removed and then none until it is hydrated again; a copy after it reconciles the
// whole topic.
func (t *Tracker) Removed(e change.ExportID, at change.LSN) {
	x := t.get(e)
	if t.streams(x) && !x.restored {
		t.freeze(x)
		x.pos = max(x.pos, at)
	}
	x.earlier, x.hasEarlier = map[int32]int64{}, true
	x.restored = false
	x.owed = true
}

// Failed records that e stopped on a permanent error. A hydrated e keeps the own position it
// reached. e gets one final record with state failed and reason, then none until it is
// hydrated again.
func (t *Tracker) Failed(e change.ExportID, reason string) {
	x := t.get(e)
	if t.streams(x) && !x.restored {
		t.freeze(x)
		// Its topic holds the stream up to its position: nothing earlier to reconcile.
		x.earlier, x.hasEarlier = nil, false
	}
	x.restored = false
	x.err = reason
	x.owed = true
}

// Owed reports whether e's last transition waits for its record (Due returns it next).
func (t *Tracker) Owed(e change.ExportID) bool {
	x, ok := t.exports[e]
	return ok && x.owed
}
