package consumer

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/formats"
	"github.com/tidemark/cdc/pkg/watermark"
)

// state is the reader's bookkeeping, free of I/O: the watermark rules (through watermark.View),
// each table's lifecycle, what each partition holds back, and the assembly of loads and cuts,
// part by part. The Reader feeds it the values of the watermark topic and the data records it
// fetched; the fuzz target feeds it arbitrary ones.
type state struct {
	view    *watermark.View
	chosen  map[change.ExportID]bool // nil: every export
	waitAll bool
	waited  bool // every chosen table has been a member once (WaitAll)

	tables map[change.ExportID]*table
	parts  map[string]map[int32]*part
	lastC  change.LSN
	events []Event       // resets and the like, in the order they happened, for the next cut
	rec    format.Record // decodeChange's buffer
	// decoders read the records of every format (nil: those that need no schema registry).
	decoders *formats.Decoders

	// resumed: the joined tables of a resumed position whose first record has not been read.
	resumed    map[change.ExportID]int
	resumeOffs map[string]map[int32]int64
	// resumedHeld: the held tables of a resumed position (Position.Held).
	resumedHeld map[change.ExportID]int

	// run is the cut being delivered, part by part (nil between cuts).
	run *cutRun
	// loadTurn: the last part was a load's, so a cut that is due goes next.
	loadTurn bool
	// deferred are watermark values read while a cut was being delivered.
	deferred []deferredValue
	// maxW is the highest watermark a chosen table's record has said (Reader.Watermark).
	maxW change.LSN
	// accept narrows the exports (Config.Accept); topicOf is the topic cdc derives for one
	// (nil: not checked); seen is what checkValue knows of each export.
	accept  func(change.ExportID) bool
	topicOf func(change.ExportID) string
	seen    map[change.ExportID]seenExport
	// where names the watermark record being applied; a table keeps its latest record's.
	where string

	// assign and unassign are the partitions to start and stop fetching (the Reader applies
	// them): start offset per partition, -1 for the earliest.
	assign   map[string]map[int32]int64
	unassign map[string][]int32
}

type phase int

const (
	phaseOut     phase = iota // not read: not hydrated, not chosen, or left
	phaseLoading              // hydrated: its copy is read and delivered in load parts
	phaseJoining              // loaded: joins at the next cut at or above hydW
	phaseJoined               // in the cuts
)

// table is one chosen export.
type table struct {
	id      change.ExportID
	topic   string
	phase   phase
	attempt int
	rec     watermark.Record // latest effective record
	where   string           // where the latest record is, for errors
	// steps are the (watermark, offsets) of the records since the last cut, watermark
	// increasing: a target C is read up to the offsets of the first step reaching it.
	steps []step
	// final is a removed or failed record of a member: it leaves once the cuts reach its
	// watermark.
	final *Event
	// hydW is the watermark of the record that said hydrated: the load delivers every change
	// below it, and the table joins at a cut at or above it.
	hydW change.LSN
	// start is where a loading table's partitions are read from (its attempt's start offsets).
	start map[int32]int64
	// load is the loading table's merge (records below hydW, up to the hydrated record's
	// offsets); loadParts counts the load parts delivered.
	load      *merge
	loadParts int
	// held: the table was joined and is being copied again. Until it joins with the new copy
	// (attempt heldAt or later), no cut passes the last one: the other tables wait for it, so
	// that no cut shows one chosen table ahead of another.
	held   bool
	heldAt int
	// resumedAt are the offsets of a table joined by a resumed position (nil otherwise). The
	// watermark topic is read again from its start, so records of the joined attempt from
	// before that position (its copy's hydrating record among them), and of every earlier
	// attempt, are history, not news.
	resumedAt map[int32]int64
	parts     map[int32]*part
}

type step struct {
	w       change.LSN
	offsets map[int32]int64
}

// part is one partition of a member's topic.
type part struct {
	t    *table
	p    int32
	next int64 // offset after the last record read
	// held are the records read and not yet delivered, in offset order; heldBytes estimates
	// their memory.
	held      []*Change
	heldBytes int
	// later are, while the table loads, its stream changes at or above its hydration
	// watermark, kept for the cuts (offset order), and laterBytes their memory. A chunked
	// copy's rows can come after such changes in a partition (cdc acknowledges a change after
	// it published it, so the watermark of the record that says hydrated can be below changes
	// published before the last chunk): the load takes every copy row below the record's
	// offsets, the cuts the rest.
	later      []*Change
	laterBytes int
	// last is the order of the last stream change taken from the partition: cdc writes a
	// partition's stream changes in commit order, so one at or below it is a re-send (an
	// at-least-once restart) and is dropped.
	last    orderKey
	hasLast bool
}

// orderKey is where a stream change sits in its partition's commit order.
type orderKey struct {
	lsn  change.LSN
	seq  int64
	rank int
}

func (k orderKey) compare(o orderKey) int {
	return cmp.Or(cmp.Compare(k.lsn, o.lsn), cmp.Compare(k.seq, o.seq), cmp.Compare(k.rank, o.rank))
}

func keyOf(ch *Change) orderKey {
	return orderKey{lsn: ch.Source.LSN, seq: ch.Source.Sequence, rank: opRank(ch.Op)}
}

// changeBytes estimates the memory a held change keeps: its images, key and source (slices of
// the record) and the struct.
func changeBytes(ch *Change) int {
	return len(ch.Before) + len(ch.After) + len(ch.Key) + len(ch.Schema) + 384
}

func newState(tables []change.ExportID, waitAll bool) *state {
	s := &state{
		view: watermark.NewView(), waitAll: waitAll && len(tables) > 0,
		tables: map[change.ExportID]*table{}, parts: map[string]map[int32]*part{},
		assign: map[string]map[int32]int64{}, unassign: map[string][]int32{},
	}
	if len(tables) > 0 {
		s.chosen = make(map[change.ExportID]bool, len(tables))
		for _, e := range tables {
			s.chosen[e] = true
		}
	}
	return s
}

// resume starts after the cut whose position pos is.
func (s *state) resume(pos Position) error {
	if s.lastC != 0 || len(s.tables) > 0 {
		return fmt.Errorf("resume: the reader has already read")
	}
	s.lastC = pos.LSN
	s.resumed = maps.Clone(pos.Joined)
	s.resumedHeld = maps.Clone(pos.Held)
	s.resumeOffs = pos.Clone().Offsets
	s.waited = true
	return nil
}

// addWatermark applies one value of the watermark topic; where names it in an error. While a
// cut is being delivered, the values wait until it is complete: a cut's members and targets do
// not change under it.
func (s *state) addWatermark(value []byte, where string) error {
	if s.run != nil {
		s.deferred = append(s.deferred, deferredValue{value, where})
		return nil
	}
	return s.applyWatermark(value, where)
}

// deferredValue is a watermark value read while a cut was being delivered.
type deferredValue struct {
	value []byte
	where string
}

// applyDeferred applies the watermark values that waited for a cut.
func (s *state) applyDeferred() error {
	for len(s.deferred) > 0 && s.run == nil {
		v := s.deferred[0]
		s.deferred = s.deferred[1:]
		if err := s.applyWatermark(v.value, v.where); err != nil {
			return err
		}
	}
	if len(s.deferred) == 0 {
		s.deferred = nil
	}
	return nil
}

func (s *state) applyWatermark(value []byte, where string) error {
	if err := s.checkValue(value, where); err != nil {
		return err
	}
	s.where = where
	changed, err := s.view.Add(value)
	if err != nil {
		if where != "" {
			return fmt.Errorf("%s: %w", where, err)
		}
		return err
	}
	for _, e := range changed {
		if s.chosen != nil && !s.chosen[e] || s.accept != nil && !s.accept(e) {
			continue
		}
		rec, _ := s.view.Get(e)
		if rec.Watermark != nil && *rec.Watermark > s.maxW {
			s.maxW = *rec.Watermark
		}
		s.update(rec)
	}
	return nil
}

func attemptOf(r watermark.Record) int {
	if r.Snapshot == nil {
		return 0
	}
	return r.Snapshot.Attempt
}

// history reports whether rec is a record a resumed table has seen before its position: of
// an earlier copy attempt, or the hydrating record of the attempt it joined with, read again
// from the watermark topic (that attempt began at or below the resumed offsets in every
// partition). A copy that begins later (an export removed and added again) is a new copy.
func (t *table) history(rec watermark.Record) bool {
	if t.resumedAt == nil {
		return false
	}
	a := attemptOf(rec)
	if a < t.attempt {
		return true
	}
	if rec.Snapshot == nil || a != t.attempt || rec.State != watermark.StateHydrating {
		return false
	}
	for p, off := range rec.Snapshot.StartOffsets {
		if off > t.resumedAt[p] {
			return false
		}
	}
	return true
}

// update applies e's new effective record.
func (s *state) update(rec watermark.Record) {
	t := s.tables[rec.Export]
	if t == nil {
		t = &table{id: rec.Export, topic: rec.Topic, parts: map[int32]*part{}}
		s.tables[rec.Export] = t
		if a, ok := s.resumed[rec.Export]; ok {
			delete(s.resumed, rec.Export)
			t.phase, t.attempt = phaseJoined, a
			t.resumedAt = maps.Clone(s.resumeOffs[rec.Topic])
			for p, off := range s.resumeOffs[rec.Topic] {
				s.addPart(t, p, off)
			}
		}
		if a, ok := s.resumedHeld[rec.Export]; ok {
			t.held, t.heldAt = true, a
		}
	}
	a := attemptOf(rec)
	if t.phase == phaseJoined && t.history(rec) {
		return // read again after a resume
	}
	if t.held && a < t.heldAt {
		return // an attempt before the re-copy the cuts wait for
	}
	t.rec, t.where = rec, s.where
	if t.phase == phaseJoined && (a != t.attempt || rec.State == watermark.StateHydrating) {
		// A new copy (attempt): the rows so far are stale. The cuts wait for the new copy.
		s.leave(t)
		t.held, t.heldAt = true, a
		s.events = append(s.events, Event{Kind: EventReset, Export: t.id, Attempt: a, Record: rec})
	}
	switch rec.State {
	case watermark.StateHydrated:
		if rec.Watermark == nil {
			return
		}
		if t.phase == phaseOut || t.phase != phaseJoined && a != t.attempt {
			s.startLoad(t, rec)
		}
		t.addStep(*rec.Watermark, rec.Offsets)
	case watermark.StateHydrating:
		if t.phase == phaseLoading || t.phase == phaseJoining {
			s.dropParts(t)
			t.phase, t.steps, t.load = phaseOut, nil, nil
		}
	case watermark.StateRemoved, watermark.StateFailed:
		kind := EventRemoved
		if rec.State == watermark.StateFailed {
			kind = EventFailed
		}
		ev := Event{Kind: kind, Export: t.id, Attempt: a, Error: rec.Error, Record: rec}
		switch t.phase {
		case phaseLoading, phaseJoining, phaseOut:
			// A load under way, or the re-copy the cuts waited for, will not come: say so.
			if t.phase != phaseOut || t.held {
				s.events = append(s.events, ev)
			}
			if t.phase != phaseOut {
				s.dropParts(t)
				t.phase, t.steps, t.load = phaseOut, nil, nil
			}
			t.held = false
		case phaseJoined:
			if rec.Watermark == nil {
				// Nothing more to deliver: it leaves with the next cut.
				s.leave(t)
				s.events = append(s.events, ev)
				return
			}
			t.final = &ev
			t.addStep(*rec.Watermark, rec.Offsets)
		}
	}
}

// startLoad starts reading t's copy attempt of rec, the record that said hydrated: from the
// attempt's start offsets up to rec's offsets, delivering every change below rec's watermark
// in load parts.
func (s *state) startLoad(t *table, rec watermark.Record) {
	s.dropParts(t)
	t.phase, t.attempt, t.steps, t.final = phaseLoading, attemptOf(rec), nil, nil
	t.hydW = *rec.Watermark
	t.topic = rec.Topic
	t.start = nil
	if rec.Snapshot != nil {
		t.start = maps.Clone(rec.Snapshot.StartOffsets)
	}
	t.loadParts = 0
	t.load = &merge{limit: t.hydW, copies: true, targets: map[*part]int64{}}
	for _, pn := range slices.Sorted(maps.Keys(rec.Offsets)) {
		pt := s.addPart(t, pn, s.startOf(t, pn))
		t.load.parts = append(t.load.parts, pt)
		t.load.targets[pt] = rec.Offsets[pn]
	}
}

// startOf is where a loading table's partition pn is read from.
func (s *state) startOf(t *table, pn int32) int64 {
	if o, ok := t.start[pn]; ok {
		return o
	}
	return -1
}

// addStep notes a record's watermark and offsets.
func (t *table) addStep(w change.LSN, offsets map[int32]int64) {
	if n := len(t.steps); n > 0 && w <= t.steps[n-1].w {
		return
	}
	t.steps = append(t.steps, step{w: w, offsets: maps.Clone(offsets)})
}

// lastW is the member's watermark: its latest step's (false when it has none).
func (t *table) lastW() (change.LSN, bool) {
	if len(t.steps) == 0 {
		return 0, false
	}
	return t.steps[len(t.steps)-1].w, true
}

// target is the offsets to read t up to for a cut at c: its first step reaching c.
func (t *table) target(c change.LSN) map[int32]int64 {
	i, _ := slices.BinarySearchFunc(t.steps, c, func(s step, c change.LSN) int { return cmp.Compare(s.w, c) })
	if i == len(t.steps) {
		i--
	}
	return t.steps[i].offsets
}

func (s *state) addPart(t *table, p int32, start int64) *part {
	pt := &part{t: t, p: p, next: max(start, 0)}
	t.parts[p] = pt
	if s.parts[t.topic] == nil {
		s.parts[t.topic] = map[int32]*part{}
	}
	s.parts[t.topic][p] = pt
	if s.assign[t.topic] == nil {
		s.assign[t.topic] = map[int32]int64{}
	}
	s.assign[t.topic][p] = start
	return pt
}

func (s *state) dropParts(t *table) {
	for p := range t.parts {
		delete(s.parts[t.topic], p)
		if a := s.assign[t.topic]; a != nil {
			delete(a, p)
		}
		s.unassign[t.topic] = append(s.unassign[t.topic], p)
	}
	t.parts = map[int32]*part{}
}

// leave takes t out of the cuts.
func (s *state) leave(t *table) {
	s.dropParts(t)
	t.phase, t.steps, t.final, t.resumedAt, t.load = phaseOut, nil, nil, nil, nil
}

// plan is a cut to read: its LSN and members (the joined tables and those joining).
type plan struct {
	c       change.LSN
	joining []*table
}

// plan returns the next cut to read, if there is one: at the lowest watermark of the members,
// when that moved, or when tables join or leave, or events wait. While a joined table is
// copied again (held), only cuts of events at the last cut's LSN are planned, until it joins
// again.
func (s *state) plan() (plan, bool) {
	if len(s.resumed) > 0 {
		return plan{}, false // a resumed member's first record is not read yet
	}
	// c is at most the watermark of every joined table.
	var joining []*table
	c, any := change.LSN(0), false
	waiting := false // a held table has not loaded its new copy yet
	for _, t := range s.sortedTables() {
		w, ok := t.lastW()
		switch {
		case t.phase == phaseJoined && !ok:
			return plan{}, false
		case t.phase == phaseJoined && t.final != nil:
			// A removed or failed table gets no more changes: it does not hold the cuts, and
			// leaves with the first one that reaches its final watermark.
		case t.phase == phaseJoined:
			if !any || w < c {
				c, any = w, true
			}
		case t.phase == phaseJoining && ok && w >= max(s.lastC, t.hydW):
			joining = append(joining, t)
		case t.held:
			waiting = true
		}
	}
	if waiting {
		if len(s.events) > 0 {
			return plan{c: s.lastC}, true
		}
		return plan{}, false
	}
	// Tables loaded at the same time join together: a loaded table waits while another table
	// is still loading, and the cuts go on without it meanwhile. (A consumer can then keep
	// every load under way in one transaction, which the joining cut commits.)
	for _, t := range s.tables {
		if t.phase == phaseLoading {
			joining = nil
			break
		}
	}
	// A joining table joins at a cut at or above the watermark it was hydrated at: its copy's
	// rows (a chunked copy's rows carry the positions of their chunks, not commit LSNs) all lie
	// below it, so the table's rows in the cut are its state at the cut, like the others'.
	for {
		cj, anyJ := c, any
		for _, t := range joining {
			if w, _ := t.lastW(); !anyJ || w < cj {
				cj, anyJ = w, true
			}
		}
		kept := joining[:0]
		for _, t := range joining {
			if t.hydW <= cj {
				kept = append(kept, t)
			}
		}
		if len(kept) == len(joining) {
			c, any = cj, anyJ
			break
		}
		joining = kept
	}
	for _, t := range s.tables {
		if t.held && t.phase == phaseJoining && !slices.Contains(joining, t) {
			// Loaded, but the others' watermarks have not reached its copy yet.
			if len(s.events) > 0 {
				return plan{c: s.lastC}, true
			}
			return plan{}, false
		}
	}
	if s.waitAll && !s.waited {
		for e := range s.chosen {
			t := s.tables[e]
			if t == nil || t.phase != phaseJoined && !slices.Contains(joining, t) {
				return plan{}, false
			}
		}
		s.waited = true
	}
	if !any {
		c = s.lastC
	}
	c = max(c, s.lastC)
	// One watermark step at a time: the lowest first step of a joined table past the last cut
	// (not below what the joining tables need), so that a reader catching up builds cuts of
	// one step each, not one cut of everything behind.
	floor := s.lastC
	for _, t := range joining {
		floor = max(floor, t.hydW)
	}
	for _, t := range s.tables {
		if t.phase != phaseJoined {
			continue
		}
		i, _ := slices.BinarySearchFunc(t.steps, s.lastC+1, func(s step, c change.LSN) int { return cmp.Compare(s.w, c) })
		if i < len(t.steps) && t.steps[i].w < c {
			c = max(t.steps[i].w, floor)
		}
	}
	leaving := false
	for _, t := range s.tables {
		if w, _ := t.lastW(); t.phase == phaseJoined && t.final != nil && w <= c {
			leaving = true
		}
	}
	if c == s.lastC && len(joining) == 0 && len(s.events) == 0 && !leaving {
		return plan{}, false
	}
	return plan{c: c, joining: joining}, true
}

// members returns the tables read for p: the joined ones and p's joining ones.
func (s *state) members(p plan) []*table {
	var out []*table
	for _, t := range s.sortedTables() {
		if t.phase == phaseJoined || t.phase == phaseJoining && slices.Contains(p.joining, t) {
			out = append(out, t)
		}
	}
	return out
}

func (s *state) sortedTables() []*table {
	return slices.SortedFunc(maps.Values(s.tables), func(a, b *table) int {
		return cmp.Or(cmp.Compare(a.id.Schema, b.id.Schema), cmp.Compare(a.id.Table, b.id.Table))
	})
}

// addRecord takes one fetched record of a partition being read. A record below what was read
// (fetched twice) is ignored, as are control records and tombstones beyond moving the
// partition's position. A joined table's change below the last cut is dropped: it was
// delivered (or belongs to a cut that is gone: at-least-once re-sends).
func (s *state) addRecord(topic string, partition int32, offset int64, control bool, key, value []byte, headers []header) error {
	pt := s.parts[topic][partition]
	if pt == nil || offset < pt.next {
		return nil
	}
	pt.next = offset + 1
	if control || value == nil {
		return nil
	}
	ch := new(Change)
	if err := decodeChange(ch, &s.rec, s.decoders, pt.t.id, topic, partition, offset, key, value, headers); err != nil {
		return err
	}
	if pt.t.phase == phaseJoined && ch.Source.LSN < s.lastC {
		return nil
	}
	if pt.t.phase == phaseLoading && !ch.Source.Snapshot && ch.Source.LSN >= pt.t.hydW {
		pt.later = append(pt.later, ch)
		pt.laterBytes += changeBytes(ch)
		return nil
	}
	pt.held = append(pt.held, ch)
	pt.heldBytes += changeBytes(ch)
	return nil
}

// reading reports whether the reader should fetch the partition: it holds less than max, or,
// while its table loads, it has not reached the load's target (what it keeps for the cuts
// meanwhile is at most the changes cdc had not acknowledged when it said hydrated).
func (pt *part) reading(max int) bool {
	if pt.t.phase == phaseLoading && pt.t.load != nil {
		if pt.next < pt.t.load.targets[pt] {
			return true
		}
		return pt.laterBytes < max
	}
	return pt.heldBytes < max
}

// merge delivers, in order, the changes below limit that a set of partitions holds below
// their target offsets: a k-way merge of the partitions' heads, so its work per change is
// O(log partitions) and its memory is what the partitions hold, whatever the number of
// changes. A partition's changes below limit are a prefix of it below its target: cdc writes
// stream changes in commit order, and a chunked copy's rows, written after stream changes of
// other keys at higher positions, are the only records that come later than their source.lsn
// says; they concern keys no change in between touched, so taking them when they come keeps
// every key's order.
type merge struct {
	limit change.LSN
	// copies: a load's merge, which takes every copy row below the targets, whatever its
	// position. A chunked copy's rows carry their chunk's low marker, and cdc's stream position
	// does not move on the markers themselves, so the record that says hydrated can carry a
	// watermark at or below the last chunk's rows: no change of the table lies between the two
	// (a change committed before the low marker is below the watermark, one after the high
	// marker above the rows), so those rows are the table's state at the watermark.
	copies  bool
	parts   []*part
	targets map[*part]int64
	// last is the last change taken: a truncate, which cdc writes to every partition, comes
	// once per partition, one after another.
	last *Change
	// truncates are the truncates taken: cdc writes one to every partition.
	truncates map[truncation]bool
	// floors: a change of a joined table below the previous cut is not delivered again
	// (addRecord drops those it reads; this drops those read while the table was joining), nor
	// one of a joining table below its hydration watermark (its load had those).
	floors map[*part]change.LSN
	// out is the part being filled, outBytes its estimated memory.
	out      []*Change
	outBytes int
}

// take moves the merge's next changes to its pending part (m.out) until that holds max
// changes or maxBytes. done is true when every partition has given all it has below limit and
// its target; otherwise, when the part is not full, a partition must be read further first.
func (m *merge) take(max, maxBytes int) (done bool) {
	for len(m.out) < max && m.outBytes < maxBytes {
		var best *part
		for _, pt := range m.parts {
			for len(pt.held) > 0 && (pt.resend(pt.held[0]) || pt.held[0].Source.LSN < m.floors[pt]) {
				pt.pop()
			}
			if len(pt.held) == 0 {
				if pt.next < m.targets[pt] {
					return false // not read far enough to know its next change
				}
				continue
			}
			h := pt.held[0]
			if h.Source.LSN >= m.limit && !(m.copies && h.Source.Snapshot) || h.Offset >= m.targets[pt] {
				continue // the rest belongs to later cuts
			}
			if best == nil || compareChanges(h, best.held[0]) < 0 {
				best = pt
			}
		}
		if best == nil {
			return true
		}
		ch := best.pop()
		if !ch.Source.Snapshot {
			best.last, best.hasLast = keyOf(ch), true
		}
		if m.last != nil && sameChange(m.last, ch) {
			continue
		}
		if ch.Op == change.OpTruncate {
			k := truncation{ch.Export, ch.Source.LSN, ch.Source.TxID, ch.Source.Sequence}
			if m.truncates[k] {
				continue
			}
			if m.truncates == nil {
				m.truncates = map[truncation]bool{}
			}
			m.truncates[k] = true
		}
		m.last = ch
		m.out = append(m.out, ch)
		m.outBytes += changeBytes(ch)
	}
	return false
}

// flush returns the pending part's changes and empties it.
func (m *merge) flush() []*Change {
	out := m.out
	m.out, m.outBytes = nil, 0
	return out
}

// truncation identifies a truncate.
type truncation struct {
	export change.ExportID
	lsn    change.LSN
	txID   uint32
	seq    int64
}

// resend reports whether ch, the partition's next record, repeats a stream change taken
// before (an at-least-once restart published it again).
func (pt *part) resend(ch *Change) bool {
	return !ch.Source.Snapshot && pt.hasLast && keyOf(ch).compare(pt.last) <= 0
}

// pop removes and returns the partition's first held change.
func (pt *part) pop() *Change {
	ch := pt.held[0]
	pt.held[0] = nil
	pt.held = pt.held[1:]
	pt.heldBytes -= changeBytes(ch)
	if len(pt.held) == 0 {
		pt.held, pt.heldBytes = nil, 0
	}
	return ch
}

// nextPart returns the next part to deliver, of at most max changes or about maxBytes: of the
// cut being delivered, or of a new cut when one is due, or else of a table's load. It returns
// nil when nothing can go on without reading further.
//
// Loads and cuts take turns: after a load part, a cut that is due goes first; after a cut, a
// load part that needs no further reading does. So a large table's load neither waits for the
// other tables' cuts nor holds them back by more than a part.
func (s *state) nextPart(max, maxBytes int) (*Cut, error) {
	if err := s.applyDeferred(); err != nil {
		return nil, err
	}
	return s.pickPart(max, maxBytes), nil
}

func (s *state) pickPart(max, maxBytes int) *Cut {
	if s.run == nil && !s.loadTurn {
		if part := s.nextLoadPart(max, maxBytes); part != nil {
			s.loadTurn = true
			return part
		}
	}
	s.loadTurn = false
	if s.run == nil {
		if p, ok := s.plan(); ok {
			s.startCut(p)
		}
	}
	if s.run != nil {
		return s.nextCutPart(max, maxBytes)
	}
	if part := s.nextLoadPart(max, maxBytes); part != nil {
		s.loadTurn = true
		return part
	}
	return nil
}

// cutRun is a cut being delivered in parts.
type cutRun struct {
	p       plan
	m       *merge
	members []*table
	parts   int // parts delivered
	prev    change.LSN
	events  []Event
}

// startCut begins delivering the cut of p: its members' partitions, read up to their targets,
// merged below p.c. Partitions a target names that are not read yet are added (from the
// earliest offset: a partition added to a joined table's topic).
func (s *state) startCut(p plan) {
	run := &cutRun{p: p, m: &merge{limit: p.c, targets: map[*part]int64{}, floors: map[*part]change.LSN{}}, prev: s.lastC, events: s.events}
	s.events = nil
	run.members = s.members(p)
	for _, t := range run.members {
		if t.phase == phaseJoining {
			run.events = append(run.events, Event{Kind: EventJoined, Export: t.id, Attempt: t.attempt, Record: t.rec})
		}
		if len(t.steps) == 0 {
			continue
		}
		for _, pn := range slices.Sorted(maps.Keys(t.target(p.c))) {
			pt := t.parts[pn]
			if pt == nil {
				pt = s.addPart(t, pn, -1)
			}
			run.m.parts = append(run.m.parts, pt)
			run.m.targets[pt] = t.target(p.c)[pn]
			switch t.phase {
			case phaseJoined:
				run.m.floors[pt] = s.lastC
			case phaseJoining:
				run.m.floors[pt] = t.hydW // its load delivered what lies below
			}
		}
	}
	for _, t := range run.members {
		if w, _ := t.lastW(); t.phase == phaseJoined && t.final != nil && w <= p.c {
			run.events = append(run.events, *t.final)
		}
	}
	s.run = run
}

// nextCutPart returns the next part of the cut being delivered, of at most max changes or
// about maxBytes, or nil when a partition must be read further first. The last part (Final)
// carries the position.
func (s *state) nextCutPart(max, maxBytes int) *Cut {
	m := s.run.m
	done := m.take(max, maxBytes)
	if !done && len(m.out) < max && m.outBytes < maxBytes {
		return nil
	}
	return s.cutPart(m.flush(), done)
}

// cutPart makes a part of the running cut; final ends the cut.
func (s *state) cutPart(changes []*Change, final bool) *Cut {
	run := s.run
	cut := &Cut{LSN: run.p.c, Prev: run.prev, Part: run.parts, Final: final, Txns: groupTxns(changes)}
	if run.parts == 0 {
		cut.Events = run.events
	}
	run.parts++
	if !final {
		return cut
	}
	var leaving []*table
	for _, t := range run.members {
		if t.phase == phaseJoining {
			t.phase, t.held, t.load, t.resumedAt = phaseJoined, false, nil, nil
		}
		// Steps below the cut are no longer needed.
		i, _ := slices.BinarySearchFunc(t.steps, run.p.c, func(s step, c change.LSN) int { return cmp.Compare(s.w, c) })
		t.steps = t.steps[i:]
		if w, _ := t.lastW(); t.final != nil && w <= run.p.c {
			leaving = append(leaving, t)
		}
	}
	for _, t := range leaving {
		s.leave(t)
	}
	s.lastC = run.p.c
	s.run = nil
	cut.Position = s.position()
	for _, t := range s.sortedTables() {
		if t.phase == phaseJoined {
			cut.Tables = append(cut.Tables, t.id)
		}
	}
	return cut
}

// nextLoadPart returns the next part of a table's load, of at most max changes or about
// maxBytes, or nil when no load can go on without reading further. Every load has at least
// one part: the last says Done.
func (s *state) nextLoadPart(max, maxBytes int) *Cut {
	for _, t := range s.sortedTables() {
		if t.phase != phaseLoading {
			continue
		}
		m := t.load
		done := m.take(max, maxBytes)
		if !done && len(m.out) < max && m.outBytes < maxBytes {
			continue
		}
		l := &Load{Export: t.id, Attempt: t.attempt, Done: done, Record: t.rec}
		part := t.loadParts
		t.loadParts++
		txns := groupTxns(m.flush())
		if done {
			t.phase, t.load = phaseJoining, nil
			for _, pt := range t.parts {
				// What the load left is for the cuts, in offset order.
				pt.held = byOffset(pt.later, pt.held)
				pt.heldBytes += pt.laterBytes
				pt.later, pt.laterBytes = nil, 0
			}
		}
		return &Cut{LSN: t.hydW, Prev: s.lastC, Load: l, Part: part, Final: done, Txns: txns}
	}
	return nil
}

// byOffset merges two lists of one partition's changes, each in offset order, into one in
// offset order. (Once a load is done, what it left in held lies past its targets, after the
// later changes read below them; but a partition's changes reach the cuts in offset order
// whatever they are.)
func byOffset(a, b []*Change) []*Change {
	if len(a) == 0 || len(b) == 0 || a[len(a)-1].Offset < b[0].Offset {
		return append(a, b...)
	}
	out := make([]*Change, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].Offset < b[0].Offset {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// position is where a reader resumes after the last cut.
func (s *state) position() Position {
	pos := Position{LSN: s.lastC, Offsets: map[string]map[int32]int64{}, Joined: map[change.ExportID]int{}}
	for _, t := range s.tables {
		if t.held && t.phase != phaseJoined {
			if pos.Held == nil {
				pos.Held = map[change.ExportID]int{}
			}
			pos.Held[t.id] = t.heldAt
		}
		if t.phase != phaseJoined {
			continue
		}
		pos.Joined[t.id] = t.attempt
		for pn, pt := range t.parts {
			off := pt.next
			if len(pt.held) > 0 {
				off = min(off, pt.held[0].Offset)
			}
			if pos.Offsets[t.topic] == nil {
				pos.Offsets[t.topic] = map[int32]int64{}
			}
			pos.Offsets[t.topic][pn] = off
		}
	}
	return pos
}

// opRank orders the two halves of a key change, which share a sequence number: the delete of
// the old key before the create of the new one, whatever partitions they landed in.
func opRank(op change.Op) int {
	if op == change.OpDelete {
		return 0
	}
	return 1
}

// compareChanges orders changes: commit LSN, a copy's rows first, txId, sequence, export, a
// delete before the other op of the same sequence (a key change's halves), then partition and
// offset (a total order). Equal changes of one export (a truncate on every partition, a
// re-send) end up next to each other.
func compareChanges(a, b *Change) int {
	if c := cmp.Compare(a.Source.LSN, b.Source.LSN); c != 0 {
		return c
	}
	if c := cmpBool(b.Source.Snapshot, a.Source.Snapshot); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Source.TxID, b.Source.TxID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Source.Sequence, b.Source.Sequence); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Export.Schema, b.Export.Schema); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Export.Table, b.Export.Table); c != 0 {
		return c
	}
	if c := cmp.Compare(opRank(a.Op), opRank(b.Op)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Partition, b.Partition); c != 0 {
		return c
	}
	return cmp.Compare(a.Offset, b.Offset)
}

// sameChange reports whether b repeats a: a truncate written to every partition, or a record
// an at-least-once restart published again (same export, transaction, sequence and op; a
// copy's rows are never repeats).
func sameChange(a, b *Change) bool {
	return !a.Source.Snapshot && !b.Source.Snapshot && a.Export == b.Export && a.Source.LSN == b.Source.LSN &&
		a.Source.TxID == b.Source.TxID && a.Source.Sequence == b.Source.Sequence && a.Op == b.Op
}

// groupTxns groups changes, in the order taken, into transactions: a run of changes with one
// commit LSN, txId and snapshot flag is one Txn. Linear; the Txns share one array of changes.
func groupTxns(ptrs []*Change) []Txn {
	if len(ptrs) == 0 {
		return nil
	}
	all := make([]Change, len(ptrs))
	var txns []Txn
	start := 0
	for i, chp := range ptrs {
		all[i] = *chp
		if i == len(ptrs)-1 || !sameTxn(chp, ptrs[i+1]) {
			txns = append(txns, Txn{CommitLSN: chp.Source.LSN, TxID: chp.Source.TxID, Snapshot: chp.Source.Snapshot, Changes: all[start : i+1 : i+1]})
			start = i + 1
		}
	}
	return txns
}

func sameTxn(a, b *Change) bool {
	return a.Source.LSN == b.Source.LSN && a.Source.TxID == b.Source.TxID && a.Source.Snapshot == b.Source.Snapshot
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// takeAssignments returns and clears the partitions to start and stop reading.
func (s *state) takeAssignments() (assign map[string]map[int32]int64, unassign map[string][]int32) {
	assign, unassign = s.assign, s.unassign
	s.assign, s.unassign = map[string]map[int32]int64{}, map[string][]int32{}
	return assign, unassign
}
