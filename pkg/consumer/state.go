package consumer

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// state is the reader's bookkeeping, free of I/O: the watermark rules (through watermark.View),
// each table's lifecycle, what each partition holds back, and the assembly of cuts. The Reader
// feeds it the values of the watermark topic and the data records it fetched; the fuzz target
// feeds it arbitrary ones.
type state struct {
	view    *watermark.View
	chosen  map[change.ExportID]bool // nil: every export
	waitAll bool
	waited  bool // every chosen table has been a member once (WaitAll)

	tables map[change.ExportID]*table
	parts  map[string]map[int32]*part
	lastC  change.LSN
	events []Event // resets, in the order they happened, for the next cut

	// resumed: the joined tables of a resumed position whose first record has not been read.
	resumed    map[change.ExportID]int
	resumeOffs map[string]map[int32]int64

	// assign and unassign are the partitions to start and stop fetching (the Reader applies
	// them): start offset per partition, -1 for the earliest.
	assign   map[string]map[int32]int64
	unassign map[string][]int32
}

type phase int

const (
	phaseOut     phase = iota // not read: not hydrated, not chosen, or left
	phaseJoining              // hydrated, joins in the next cut
	phaseJoined               // in the cuts
)

// table is one chosen export.
type table struct {
	id      change.ExportID
	topic   string
	phase   phase
	attempt int
	rec     watermark.Record // latest effective record
	// steps are the (watermark, offsets) of the records since the last cut, watermark
	// increasing: a target C is read up to the offsets of the first step reaching it.
	steps []step
	// final is a removed or failed record of a member: it leaves once the cuts reach its
	// watermark.
	final *Event
	// hydW is the watermark of the record that said hydrated: the table joins at a cut at or
	// above it.
	hydW change.LSN
	// start is where a joining table's partitions are read from (its attempt's start offsets).
	start map[int32]int64
	parts map[int32]*part
}

type step struct {
	w       change.LSN
	offsets map[int32]int64
}

// part is one partition of a member's topic.
type part struct {
	t    *table
	p    int32
	next int64     // offset after the last record read
	held []*Change // read, not delivered (commit LSN >= the last cut, or joining), offset order
	// heldBytes estimates the memory of held.
	heldBytes int
}

// changeBytes estimates the memory a held change keeps: its images, key and source (slices of
// the record) and the struct.
func changeBytes(ch *Change) int { return len(ch.Before) + len(ch.After) + len(ch.Key) + 384 }

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
	s.resumeOffs = pos.Clone().Offsets
	s.waited = true
	return nil
}

// addWatermark applies one value of the watermark topic.
func (s *state) addWatermark(value []byte) error {
	changed, err := s.view.Add(value)
	if err != nil {
		return err
	}
	for _, e := range changed {
		if s.chosen != nil && !s.chosen[e] {
			continue
		}
		rec, _ := s.view.Get(e)
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

// update applies e's new effective record.
func (s *state) update(rec watermark.Record) {
	t := s.tables[rec.Export]
	if t == nil {
		t = &table{id: rec.Export, topic: rec.Topic, parts: map[int32]*part{}}
		s.tables[rec.Export] = t
		if a, ok := s.resumed[rec.Export]; ok {
			delete(s.resumed, rec.Export)
			t.phase, t.attempt = phaseJoined, a
			for p, off := range s.resumeOffs[rec.Topic] {
				s.addPart(t, p, off)
			}
		}
	}
	t.rec = rec
	a := attemptOf(rec)
	if t.phase == phaseJoined && (a != t.attempt || rec.State == watermark.StateHydrating) {
		// A new copy (attempt): the rows so far are stale.
		s.leave(t)
		s.events = append(s.events, Event{Kind: EventReset, Export: t.id, Attempt: a, Record: rec})
	}
	switch rec.State {
	case watermark.StateHydrated:
		if rec.Watermark == nil {
			return
		}
		if t.phase == phaseOut || t.phase == phaseJoining && a != t.attempt {
			s.dropParts(t)
			t.phase, t.attempt, t.steps, t.final = phaseJoining, a, nil, nil
			t.hydW = *rec.Watermark
			t.topic = rec.Topic
			t.start = nil
			if rec.Snapshot != nil {
				t.start = maps.Clone(rec.Snapshot.StartOffsets)
			}
		}
		t.addStep(*rec.Watermark, rec.Offsets)
	case watermark.StateHydrating:
		if t.phase == phaseJoining {
			s.dropParts(t)
			t.phase, t.steps = phaseOut, nil
		}
	case watermark.StateRemoved, watermark.StateFailed:
		switch t.phase {
		case phaseJoining:
			s.dropParts(t)
			t.phase, t.steps = phaseOut, nil
		case phaseJoined:
			kind := EventRemoved
			if rec.State == watermark.StateFailed {
				kind = EventFailed
			}
			ev := Event{Kind: kind, Export: t.id, Attempt: a, Error: rec.Error, Record: rec}
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
	t.phase, t.steps, t.final = phaseOut, nil, nil
}

// plan is a cut being read: its LSN and members (the joined tables and those joining).
type plan struct {
	c       change.LSN
	joining []*table
}

// plan returns the next cut to read, if there is one: at the lowest watermark of the members,
// when that moved, or when tables join or leave, or events wait.
func (s *state) plan() (plan, bool) {
	if len(s.resumed) > 0 {
		return plan{}, false // a resumed member's first record is not read yet
	}
	// c is at most the watermark of every joined table.
	var joining []*table
	c, any := change.LSN(0), false
	for _, t := range s.sortedTables() {
		w, ok := t.lastW()
		switch {
		case t.phase == phaseJoined && !ok:
			return plan{}, false
		case t.phase == phaseJoined:
			if !any || w < c {
				c, any = w, true
			}
		case t.phase == phaseJoining && ok && w >= max(s.lastC, t.hydW):
			joining = append(joining, t)
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

// members returns the tables read for p: the joined ones and p's joining ones still joining.
func (s *state) members(p plan) []*table {
	var out []*table
	for _, t := range s.sortedTables() {
		w, ok := t.lastW()
		if t.phase == phaseJoined || t.phase == phaseJoining && ok && w >= p.c && t.hydW <= p.c && slices.Contains(p.joining, t) {
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

// need returns the partitions p still has to read, with their target offsets; it makes sure
// every partition a target names is being read (a joining table's from its start offsets).
func (s *state) need(p plan) map[*part]int64 {
	out := map[*part]int64{}
	for _, t := range s.members(p) {
		for pn, off := range t.target(p.c) {
			pt := t.parts[pn]
			if pt == nil {
				start := int64(-1)
				if o, ok := t.start[pn]; ok && t.phase == phaseJoining {
					start = o
				}
				pt = s.addPart(t, pn, start)
			}
			if pt.next < off {
				out[pt] = off
			}
		}
	}
	return out
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
	if err := decodeChange(ch, pt.t.id, topic, partition, offset, key, value, headers); err != nil {
		return err
	}
	if pt.t.phase == phaseJoined && ch.Source.LSN < s.lastC {
		return nil
	}
	pt.held = append(pt.held, ch)
	pt.heldBytes += changeBytes(ch)
	return nil
}

// build assembles the cut of p once need(p) is empty.
func (s *state) build(p plan) *Cut {
	cut := &Cut{LSN: p.c, Prev: s.lastC, Events: s.events}
	s.events = nil
	var changes []*Change
	var leaving []*table
	for _, t := range s.members(p) {
		joining := t.phase == phaseJoining
		if joining {
			t.phase = phaseJoined
			cut.Events = append(cut.Events, Event{Kind: EventJoined, Export: t.id, Attempt: t.attempt, Record: t.rec})
		}
		for _, pn := range slices.Sorted(maps.Keys(t.parts)) {
			pt := t.parts[pn]
			kept := pt.held[:0]
			for _, ch := range pt.held {
				if ch.Source.LSN >= p.c {
					kept = append(kept, ch)
					continue
				}
				changes = append(changes, ch)
			}
			clear(pt.held[len(kept):])
			pt.held = kept
			pt.heldBytes = 0
			for _, ch := range kept {
				pt.heldBytes += changeBytes(ch)
			}
		}
		// Steps below the cut are no longer needed.
		i, _ := slices.BinarySearchFunc(t.steps, p.c, func(s step, c change.LSN) int { return cmp.Compare(s.w, c) })
		t.steps = t.steps[i:]
		if w, _ := t.lastW(); t.final != nil && w <= p.c {
			leaving = append(leaving, t)
		}
	}
	for _, t := range leaving {
		cut.Events = append(cut.Events, *t.final)
		s.leave(t)
	}
	cut.Txns = groupTxns(changes)
	s.lastC = p.c
	cut.Position = s.position()
	for _, t := range s.sortedTables() {
		if t.phase == phaseJoined {
			cut.Tables = append(cut.Tables, t.id)
		}
	}
	return cut
}

// position is where a reader resumes after the last cut.
func (s *state) position() Position {
	pos := Position{LSN: s.lastC, Offsets: map[string]map[int32]int64{}, Joined: map[change.ExportID]int{}}
	for _, t := range s.tables {
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

// compareChanges orders changes: commit LSN, a copy's rows first, txId, sequence, then export,
// partition and offset (a total order).
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

// groupTxns groups changes into transactions in commit order, changes in sequence order, each
// change once.
func groupTxns(ptrs []*Change) []Txn {
	slices.SortFunc(ptrs, compareChanges)
	var txns []Txn
	runStart := 0 // first change of the current (export, LSN, txId, sequence) run
	for i, chp := range ptrs {
		if i > 0 && !sameRun(ptrs[runStart], chp) {
			runStart = i
		}
		dup := false
		for _, prev := range ptrs[runStart:i] {
			if sameChange(prev, chp) {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		ch := *chp
		n := len(txns)
		if n == 0 || txns[n-1].CommitLSN != ch.Source.LSN || txns[n-1].TxID != ch.Source.TxID || txns[n-1].Snapshot != ch.Source.Snapshot {
			txns = append(txns, Txn{CommitLSN: ch.Source.LSN, TxID: ch.Source.TxID, Snapshot: ch.Source.Snapshot})
			n++
		}
		txns[n-1].Changes = append(txns[n-1].Changes, ch)
	}
	return txns
}

// sameRun reports whether a and b share export, transaction and sequence.
func sameRun(a, b *Change) bool {
	return a.Export == b.Export && a.Source.LSN == b.Source.LSN && a.Source.TxID == b.Source.TxID &&
		a.Source.Sequence == b.Source.Sequence && a.Source.Snapshot == b.Source.Snapshot
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
