package watermark

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

var (
	propSeed  = flag.Uint64("watermark.seed", 0, "base seed of the tracker property test (0: from the clock)")
	propRuns  = flag.Int("watermark.runs", 200, "random histories in the tracker property test")
	propSteps = flag.Int("watermark.steps", 400, "operations per random history")
)

// TestTrackerProperties drives trackers through random histories of snapshots, stream progress,
// removals, failures, publications and restarts (a fresh tracker, possibly in the other mode,
// restored from the durable records) and checks the watermark rules after every operation.
// A failure names its seed; rerun with -watermark.seed=<seed> -watermark.runs=1.
func TestTrackerProperties(t *testing.T) {
	base := *propSeed
	if base == 0 {
		base = uint64(time.Now().UnixNano())
	}
	runs := *propRuns
	if testing.Short() {
		runs = min(runs, 30)
	}
	t.Logf("base seed %d (rerun with -watermark.seed=%d)", base, base)
	for i := range runs {
		seed := base + uint64(i)
		newSim(t, seed).run(*propSteps)
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
	}
}

// FuzzTrackerHistory runs the same random histories with seeds chosen by the fuzzer.
func FuzzTrackerHistory(f *testing.F) {
	f.Add(uint64(1), uint16(200))
	f.Add(uint64(42), uint16(1000))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16) {
		newSim(t, seed).run(int(steps % 2000))
	})
}

// trackerSim is a random history against a model of what the tracker must do.
type trackerSim struct {
	// offs is each topic's end offset (partition 0), moved at random before each Due.
	offs map[string]int64
	tb   testing.TB
	seed uint64
	rng  *rand.Rand
	mode Mode
	tr   *Tracker
	now  time.Time
	ids  []change.ExportID
	m    map[change.ExportID]*simExport
	ops  []string // recent operations, for failure messages

	stream    change.LSN // S_d of the current process (the highest Advance)
	resumeAt  change.LSN // the slot's position when the current process started
	hasStream bool
	top       change.LSN  // the highest LSN seen anywhere: a new consistent point is above it
	sdEver    change.LSN  // the highest durable stream position ever, across restarts
	slot      change.LSN  // the highest Confirmable ever: what the slot may hold
	hasSlot   bool        //
	g         *change.LSN // the model's global watermark (global mode)
	pending   []Record    // records returned by Due and not yet Published
	durable   []Record    // the watermark topic: every durable record, in order
}

// simExport is the model of one export.
type simExport struct {
	state    State // "" while unknown to the current process
	restored bool
	c        change.LSN
	copied   bool
	pos      change.LSN // own position P(e) when hasPos
	hasPos   bool
	attempt  int

	transition bool // a state transition since its last record
	hasRec     bool
	lastAt     time.Time
	lastW      *change.LSN
	lastPos    change.LSN
	maxW       *change.LSN // highest watermark returned by Due in this process (or restored)
	durableW   *change.LSN // highest durable watermark ever
	durableRec *Record     // last durable record
}

func newSim(tb testing.TB, seed uint64) *trackerSim {
	s := &trackerSim{
		tb:   tb,
		seed: seed,
		rng:  rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15)),
		now:  trackerT0,
		m:    make(map[change.ExportID]*simExport),
	}
	s.mode = []Mode{ModeIndependent, ModeGlobal}[s.rng.IntN(2)]
	for i := range 1 + s.rng.IntN(5) {
		id := change.ExportID{Schema: "public", Table: fmt.Sprintf("t%d", i)}
		s.ids = append(s.ids, id)
		s.m[id] = &simExport{}
	}
	s.tr = newTracker(Options{Mode: s.mode, Interval: testInterval})
	return s
}

func (s *trackerSim) fatalf(format string, args ...any) {
	s.tb.Helper()
	recent := s.ops[max(0, len(s.ops)-25):]
	s.tb.Fatalf("seed %d, mode %s: %s\nrecent operations:\n  %s", s.seed, s.mode, fmt.Sprintf(format, args...), strings.Join(recent, "\n  "))
}

func (s *trackerSim) logf(format string, args ...any) {
	s.ops = append(s.ops, fmt.Sprintf(format, args...))
}

func (s *trackerSim) run(steps int) {
	for range steps {
		e := s.ids[s.rng.IntN(len(s.ids))]
		switch n := s.rng.IntN(100); {
		case n < 8:
			s.start(e)
		case n < 14:
			s.rows(e)
		case n < 20:
			s.copied(e)
		case n < 30:
			s.hydrated(e)
		case n < 60:
			s.advance()
		case n < 63:
			s.removed(e)
		case n < 66:
			s.failed(e)
		case n < 96:
			s.due()
		default:
			s.restart()
		}
		if s.rng.IntN(3) == 0 { // the slot is confirmed now and then, so it can lag behind
			s.checkConfirmable()
		}
		s.checkStatus()
	}
}

// fresh returns a new consistent point: a WAL position above everything seen so far.
func (s *trackerSim) fresh() change.LSN {
	s.top += 1 + change.LSN(s.rng.IntN(100))
	return s.top
}

func (s *trackerSim) start(e change.ExportID) {
	m := s.m[e]
	c := s.fresh()
	got := own(s.tr).StartHydration(e, "p."+e.Table, c, 1000, map[int32]int64{0: 0}, s.now)
	s.logf("StartHydration(%s, C=%s) = %d", e, c, got)
	if got != m.attempt+1 {
		s.fatalf("StartHydration(%s) = attempt %d; want %d", e, got, m.attempt+1)
	}
	m.attempt = got
	m.state, m.restored, m.c, m.copied, m.hasPos, m.pos = StateHydrating, false, c, false, false, 0
	m.transition = true
}

func (s *trackerSim) rows(e change.ExportID) {
	n := int64(s.rng.IntN(1000))
	s.tr.SnapshotRows(e, n)
	s.logf("SnapshotRows(%s, %d)", e, n)
}

func (s *trackerSim) copied(e change.ExportID) {
	m := s.m[e]
	s.tr.SnapshotCopied(e, s.now)
	s.logf("SnapshotCopied(%s)", e)
	if m.state == StateHydrating && !m.restored && !m.copied {
		m.copied, m.transition = true, true
	}
}

func (s *trackerSim) hydrated(e change.ExportID) {
	m := s.m[e]
	if m.state == StateHydrating && !m.restored {
		if !m.copied || !s.hasStream || s.stream < m.c {
			return // the replication stage cannot release e yet
		}
		at := m.c + change.LSN(s.rng.Uint64N(uint64(s.stream-m.c)+1))
		own(s.tr).Hydrated(e, at)
		s.logf("Hydrated(%s, %s)", e, at)
		m.state, m.pos, m.hasPos, m.transition = StateHydrated, max(at, s.stream), true, true
		return
	}
	// A late or stray call: no effect (a hydrated export's position is already past it).
	own(s.tr).Hydrated(e, s.stream)
	s.logf("Hydrated(%s, %s) [stray]", e, s.stream)
}

func (s *trackerSim) advance() {
	if s.hasStream && s.rng.IntN(6) == 0 {
		back := s.stream - change.LSN(s.rng.Uint64N(uint64(s.stream)+1))
		s.tr.Advance(back)
		s.logf("Advance(%s) [regressing]", back)
		return
	}
	if !s.hasStream {
		s.stream = s.resumeAt // replication resumes at the slot's confirmed position
	}
	s.stream += 1 + change.LSN(s.rng.IntN(200))
	s.hasStream = true
	s.top, s.sdEver = max(s.top, s.stream), max(s.sdEver, s.stream)
	s.tr.Advance(s.stream)
	s.logf("Advance(%s)", s.stream)
	for _, m := range s.m {
		if m.state == StateHydrated {
			m.pos = max(m.pos, s.stream)
		}
	}
}

func (s *trackerSim) removed(e change.ExportID) {
	m := s.m[e]
	at := s.stream - change.LSN(s.rng.Uint64N(min(uint64(s.stream), 50)+1))
	own(s.tr).Removed(e, at)
	s.logf("Removed(%s, %s)", e, at)
	if m.state == StateRemoved {
		return
	}
	if m.state == StateHydrated {
		m.pos = max(m.pos, at)
	}
	m.state, m.restored, m.transition = StateRemoved, false, true
}

func (s *trackerSim) failed(e change.ExportID) {
	m := s.m[e]
	own(s.tr).Failed(e, "boom "+e.Table)
	s.logf("Failed(%s)", e)
	if (m.state == StateFailed && !m.restored) || m.state == StateRemoved {
		return
	}
	m.state, m.restored, m.transition = StateFailed, false, true
}

// expectedW is what the model says e's next record carries.
func (s *trackerSim) expectedW(m *simExport) *change.LSN {
	var w *change.LSN
	switch {
	case m.state == StateHydrating:
		// No watermark while hydrating, in either mode.
	case s.mode == ModeGlobal && m.state.live():
		w = s.g
	case s.mode == ModeGlobal:
		if s.g != nil && m.hasPos {
			v := min(*s.g, m.pos)
			w = &v
		}
	case m.hasPos:
		w = &m.pos
	}
	return maxLSN(m.maxW, w)
}

// updateGlobal moves the model's global watermark as a Due does.
func (s *trackerSim) updateGlobal() {
	if s.mode != ModeGlobal {
		return
	}
	var lowest *change.LSN
	for _, m := range s.m {
		if m.restored {
			continue
		}
		switch m.state {
		case StateHydrating:
			return
		case StateHydrated:
			if lowest == nil || m.pos < *lowest {
				lowest = &m.pos
			}
		}
	}
	s.g = maxLSN(s.g, lowest)
}

func (s *trackerSim) due() {
	if s.rng.IntN(3) > 0 {
		s.now = s.now.Add(time.Duration(s.rng.Int64N(int64(testInterval * 3 / 2))))
	}
	s.updateGlobal()
	// Some topics received records since the last Due: their exports are busy, not quiet.
	if s.offs == nil {
		s.offs = make(map[string]int64)
	}
	for _, e := range s.ids {
		if s.rng.IntN(4) == 0 {
			s.offs["p."+e.Table]++
		}
	}
	offsets := func(topic string) map[int32]int64 { return map[int32]int64{0: s.offs[topic]} }
	recs := dueRecords(s.tb, s.tr, s.now, offsets)
	for _, r := range recs {
		// An own record covers its topic's end; the quiet record may speak only for exports
		// whose own latest record still does.
		if r.Offsets[0] != s.offs[r.Topic] {
			s.fatalf("%s: record offsets %v (from the quiet record: %v); the topic ends at %d", r.Export, r.Offsets, fromQuiet[r.Export], s.offs[r.Topic])
		}
	}
	s.logf("Due(%s) = %d records", s.now.Format("15:04:05.000"), len(recs))
	got := make(map[change.ExportID]Record, len(recs))
	for _, r := range recs {
		if _, dup := got[r.Export]; dup {
			s.fatalf("two records for %s in one Due", r.Export)
		}
		got[r.Export] = r
		s.checkRecord(r)
	}
	s.checkGlobalAgreement(recs)
	for e, m := range s.m {
		r, ok := got[e]
		if ok {
			m.hasRec, m.lastAt, m.lastW, m.lastPos = true, s.now, r.Watermark, r.Position
			m.maxW, m.transition = maxLSN(m.maxW, r.Watermark), false
			continue
		}
		age := s.now.Sub(m.lastAt)
		switch {
		case m.transition:
			s.fatalf("%s: no record after a state transition to %s", e, m.state)
		case !m.state.live() || m.restored:
		case !m.hasRec || age >= testInterval:
			s.fatalf("%s: no heartbeat; last record %v ago", e, age)
		case age >= testInterval/4 && (!equalLSN(s.expectedW(m), m.lastW) || s.expectedPos(m) != m.lastPos):
			s.fatalf("%s: watermark moved to %s (position %s) but no record %v after the last", e, fmtLSN(s.expectedW(m)), s.expectedPos(m), age)
		}
	}
	s.pending = append(s.pending, recs...)
	if s.rng.IntN(10) > 0 { // otherwise the batch waits: the next Published covers it too
		s.published()
	}
}

func (s *trackerSim) expectedPos(m *simExport) change.LSN {
	if m.hasPos {
		return m.pos
	}
	return 0
}

// checkRecord checks one record of a Due against the rules and the model.
func (s *trackerSim) checkRecord(r Record) {
	e, m := r.Export, s.m[r.Export]
	if r.Version != Version || r.Mode != s.mode || r.Topic == "" && m.attempt > 0 {
		s.fatalf("%s: bad header %d %s %q", e, r.Version, r.Mode, r.Topic)
	}
	if m.restored || (!m.transition && !m.state.live()) {
		s.fatalf("%s: record (%s) for an export that must be silent", e, r.State)
	}
	if r.State != m.state {
		s.fatalf("%s: state %s; model says %s", e, r.State, m.state)
	}
	if age := s.now.Sub(m.lastAt); !m.transition && m.hasRec && age >= 0 && age < testInterval/4 && !fromQuiet[e] {
		s.fatalf("%s: record only %v after the last one, without a state transition", e, age)
	}
	if (r.Watermark == nil) != (r.WatermarkLSN == nil) || r.Watermark != nil && uint64(*r.Watermark) != *r.WatermarkLSN {
		s.fatalf("%s: watermark %s and watermark_lsn %v disagree", e, fmtLSN(r.Watermark), r.WatermarkLSN)
	}
	if r.State == StateFailed && r.Error != "boom "+e.Table {
		s.fatalf("%s: failed record without its reason: %q", e, r.Error)
	}
	// (1) A published watermark never decreases.
	if m.maxW != nil && (r.Watermark == nil || *r.Watermark < *m.maxW) {
		s.fatalf("%s: watermark went back from %s to %s", e, m.maxW, fmtLSN(r.Watermark))
	}
	// The own position of a hydrated export is the model's.
	if r.Position != s.expectedPos(m) {
		s.fatalf("%s: position %s; model says %s", e, r.Position, s.expectedPos(m))
	}
	if s.mode == ModeIndependent {
		// (2) Independent: a hydrated export publishes its own position unless it holds a
		// higher value from before; a hydrating one never publishes above what it had.
		switch r.State {
		case StateHydrated:
			if r.Watermark == nil || *r.Watermark != r.Position && !(*r.Watermark > r.Position && equalLSN(r.Watermark, m.maxW)) {
				s.fatalf("%s: hydrated with watermark %s, position %s, published before %s", e, fmtLSN(r.Watermark), r.Position, fmtLSN(m.maxW))
			}
		case StateHydrating:
			if !equalLSN(r.Watermark, m.maxW) {
				s.fatalf("%s: hydrating with watermark %s; published before %s", e, fmtLSN(r.Watermark), fmtLSN(m.maxW))
			}
		}
	}
	if r.State == StateHydrated && r.Watermark != nil && *r.Watermark > r.Position && !equalLSN(r.Watermark, m.maxW) {
		s.fatalf("%s: watermark %s above its own position %s", e, r.Watermark, r.Position)
	}
	// (5) A watermark never passes the durable stream position.
	if r.Watermark != nil && *r.Watermark > s.sdEver {
		s.fatalf("%s: watermark %s above the durable stream position %s", e, r.Watermark, s.sdEver)
	}
	// The exact value the rules give.
	if want := s.expectedW(m); !equalLSN(r.Watermark, want) {
		s.fatalf("%s (%s): watermark %s; model says %s", e, r.State, fmtLSN(r.Watermark), fmtLSN(want))
	}
	// The format round-trips.
	b, err := Encode(r)
	if err != nil {
		s.fatalf("encode: %v", err)
	}
	back, err := Decode(b)
	if err != nil {
		s.fatalf("decode %s: %v", b, err)
	}
	if b2, _ := Encode(back); !bytes.Equal(b, b2) {
		s.fatalf("round trip changed the record:\n%s\n%s", b, b2)
	}
}

// checkGlobalAgreement: (3) in global mode the hydrated exports of one Due publish the same
// watermark, except an export holding a higher value it published before.
func (s *trackerSim) checkGlobalAgreement(recs []Record) {
	if s.mode != ModeGlobal {
		return
	}
	var common *change.LSN
	first := true
	for _, r := range recs {
		if r.State != StateHydrated || equalLSN(r.Watermark, s.m[r.Export].maxW) && r.Watermark != nil && !equalLSN(r.Watermark, s.g) {
			continue // not hydrated (a hydrating export has none), or holding its earlier value
		}
		if first {
			common, first = r.Watermark, false
		} else if !equalLSN(common, r.Watermark) {
			s.fatalf("global mode: %s publishes %s while another live export publishes %s", r.Export, fmtLSN(r.Watermark), fmtLSN(common))
		}
	}
	// And that common value is no higher than any hydrated export's own position.
	for e, m := range s.m {
		if common != nil && m.state == StateHydrated && !m.restored && *common > m.pos {
			s.fatalf("global watermark %s above the own position %s of %s", common, m.pos, e)
		}
	}
}

// published makes the pending records durable, as Kafka acknowledging them.
func (s *trackerSim) published() {
	s.tr.Published()
	s.logf("Published")
	recs := s.pending
	s.pending = nil
	for _, r := range recs {
		m := s.m[r.Export]
		// (1) across the durable history, restarts included.
		if m.durableW != nil && (r.Watermark == nil || *r.Watermark < *m.durableW) {
			s.fatalf("%s: durable watermark went back from %s to %s", r.Export, m.durableW, fmtLSN(r.Watermark))
		}
		// The slot was never confirmed past a position a restart would resume from.
		if r.State == StateHydrated && s.hasSlot && r.Position < s.slot {
			s.fatalf("%s: durable hydrated position %s below the confirmed slot position %s", r.Export, r.Position, s.slot)
		}
		m.durableW = maxLSN(m.durableW, r.Watermark)
		m.durableRec = &r
		s.durable = append(s.durable, r)
	}
}

// checkConfirmable: (4) never decreasing, never above a hydrated export's durable or current
// own position.
func (s *trackerSim) checkConfirmable() {
	c, ok := s.tr.Confirmable()
	if !ok {
		if s.hasStream {
			s.fatalf("Confirmable not ok after Advance")
		}
		return
	}
	if s.hasSlot && c < s.slot {
		s.fatalf("Confirmable went back from %s to %s", s.slot, c)
	}
	for e, m := range s.m {
		if r := m.durableRec; r != nil && r.State == StateHydrated && c > r.Position {
			s.fatalf("Confirmable %s above the durable position %s of hydrated %s", c, r.Position, e)
		}
		if m.state == StateHydrated && !m.restored && c > m.pos {
			s.fatalf("Confirmable %s above the own position %s of hydrated %s", c, m.pos, e)
		}
	}
	s.slot, s.hasSlot = c, true
	s.top = max(s.top, c)
}

// checkStatus compares Status with the model.
func (s *trackerSim) checkStatus() {
	for _, st := range s.tr.Status() {
		m := s.m[st.Export]
		if st.State != m.state || st.Restored != m.restored || st.Attempt != m.attempt {
			s.fatalf("Status(%s) = %s restored=%v attempt=%d; model says %s restored=%v attempt=%d",
				st.Export, st.State, st.Restored, st.Attempt, m.state, m.restored, m.attempt)
		}
		if m.state == StateHydrated && (!st.HasPosition || st.Position != m.pos) {
			s.fatalf("Status(%s) position %s; model says %s", st.Export, st.Position, m.pos)
		}
	}
}

// restart crashes the process (records in flight are lost) and starts a fresh tracker, possibly
// in the other mode, from the durable records.
func (s *trackerSim) restart() {
	if s.rng.IntN(2) == 0 {
		s.mode = []Mode{ModeIndependent, ModeGlobal}[s.rng.IntN(2)]
	}
	s.tr = newTracker(Options{Mode: s.mode, Interval: testInterval})
	s.hasStream, s.stream, s.g, s.pending = false, 0, nil, nil
	s.resumeAt = s.slot
	s.logf("restart in %s mode with %d durable records", s.mode, len(s.durable))
	// Compaction keeps at least the last record of each export, often a few more.
	kept := make(map[change.ExportID]int)
	var compacted []Record
	for i := len(s.durable) - 1; i >= 0; i-- {
		if r := s.durable[i]; kept[r.Export] < 3 {
			kept[r.Export]++
			compacted = append(compacted, r)
		}
	}
	slices.Reverse(compacted)
	s.durable = compacted
	// Read the watermark topic through the format, as the sink does.
	recs := make([]Record, 0, len(s.durable))
	for _, r := range s.durable {
		b, err := Encode(r)
		if err != nil {
			s.fatalf("encode: %v", err)
		}
		d, err := Decode(b)
		if err != nil {
			s.fatalf("decode: %v", err)
		}
		recs = append(recs, d)
	}
	s.tr.Restore(recs)
	seedView(s.tb, s.tr, recs)

	allW := true
	var minW *change.LSN
	for _, e := range s.ids {
		m := s.m[e]
		r := m.durableRec
		if r == nil {
			s.m[e] = &simExport{}
			continue
		}
		nm := &simExport{
			state: r.State, restored: r.State != StateHydrated,
			pos: r.Position, hasPos: r.State == StateHydrated || (r.State != StateHydrating && r.Position != 0),
			hasRec: true, lastAt: r.Time, lastW: r.Watermark, lastPos: r.Position,
			maxW: m.durableW, durableW: m.durableW, durableRec: r,
		}
		if r.Snapshot != nil {
			nm.attempt = r.Snapshot.Attempt
		}
		if r.State == StateHydrated {
			if r.Watermark == nil {
				allW = false
			} else if minW == nil || *r.Watermark < *minW {
				minW = r.Watermark
			}
		}
		s.m[e] = nm
	}
	if allW {
		s.g = cloneLSN(minW)
	}
	if got := s.tr.Resume(); len(got) != countHydrated(s.m) {
		s.fatalf("Resume() = %v after restart", got)
	}
	// The pipeline hydrates again every restored export that was hydrating.
	for _, e := range s.ids {
		if m := s.m[e]; m.restored && m.state == StateHydrating && s.rng.IntN(4) > 0 {
			s.start(e)
		}
	}
}

func countHydrated(m map[change.ExportID]*simExport) int {
	n := 0
	for _, x := range m {
		if x.state == StateHydrated {
			n++
		}
	}
	return n
}
