package watermark

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"sync"

	"github.com/tidemark/cdc/pkg/change"
)

// testOwner stands in for the pipeline's owner of the exports' lives: it keeps each export's
// state, the one the tracker is told (SetState), decides which transitions happen (the rules the
// tracker no longer judges), and tells the tracker of each one while the export is still in the
// state it leaves.
type testOwner struct {
	tr     *Tracker
	states map[change.ExportID]State
}

// owners maps each tracker made by newTracker to its owner.
var owners sync.Map

// newTracker returns a tracker that follows a testOwner (own).
func newTracker(opts Options) *Tracker {
	tr := NewTracker(opts)
	o := &testOwner{tr: tr, states: make(map[change.ExportID]State)}
	owners.Store(tr, o)
	return tr
}

// own returns tr's owner.
func own(tr *Tracker) *testOwner {
	o, ok := owners.Load(tr)
	if !ok {
		panic("tracker not made by newTracker")
	}
	return o.(*testOwner)
}

// state is e's state as the owner knows it; for an export it has not taken up, what the tracker
// restored, and whether it is restored.
func (o *testOwner) state(e change.ExportID) (State, bool) {
	if s, ok := o.states[e]; ok {
		return s, o.restored(e)
	}
	for _, s := range o.tr.Status() {
		if s.Export == e {
			return s.State, s.Restored
		}
	}
	return "", false
}

func (o *testOwner) restored(e change.ExportID) bool {
	for _, s := range o.tr.Status() {
		if s.Export == e {
			return s.Restored
		}
	}
	return false
}

func (o *testOwner) StartHydration(e change.ExportID, topic string, c change.LSN, estimatedRows int64, startOffsets map[int32]int64, now time.Time) int {
	a := o.tr.StartHydration(e, topic, c, estimatedRows, startOffsets, now)
	o.set(e, StateHydrating)
	return a
}

func (o *testOwner) StartChunked(e change.ExportID, topic string, estimatedRows int64, startOffsets map[int32]int64, now time.Time) int {
	a := o.tr.StartChunked(e, topic, estimatedRows, startOffsets, now)
	o.set(e, StateHydrating)
	return a
}

func (o *testOwner) Holding(e change.ExportID) {
	o.tr.Holding(e)
	o.set(e, StateHydrating)
}

// set moves e to s, and tells the tracker.
func (o *testOwner) set(e change.ExportID, s State) {
	o.states[e] = s
	o.tr.SetState(e, s)
}

// Hydrated: from hydrating (a copy done) or hydrated (its position rises).
func (o *testOwner) Hydrated(e change.ExportID, at change.LSN) {
	if s, ok := o.states[e]; !ok || !s.live() {
		return
	}
	o.tr.Hydrated(e, at)
	o.set(e, StateHydrated)
}

// Removed: once.
func (o *testOwner) Removed(e change.ExportID, at change.LSN) {
	if s, _ := o.state(e); s == StateRemoved {
		return
	}
	o.tr.Removed(e, at)
	o.set(e, StateRemoved)
}

// Failed: once in a life, and not after the removal.
func (o *testOwner) Failed(e change.ExportID, reason string) {
	if s, restored := o.state(e); s == StateFailed && !restored || s == StateRemoved {
		return
	}
	o.tr.Failed(e, reason)
	o.set(e, StateFailed)
}

// checkRecords fails unless every record says the state its export's owner gives it: the
// tracker keeps no state of its own that could say otherwise.
func (o *testOwner) checkRecords(tb testing.TB, recs []Record) {
	tb.Helper()
	for _, r := range recs {
		if s, ok := o.states[r.Export]; ok && r.State != s {
			tb.Fatalf("%s: its record says %s, its owner %s", r.Export, r.State, s)
		}
	}
}

// TestTrackerStateIsTheOwners: what an export's records and status say is the state its owner
// gives it, at once, with no transition method called; an export the owner has not taken up
// says what its last record said. The tracker holds no lifecycle state beside the owner's: the
// only State it keeps of an export is what its last record said.
func TestTrackerStateIsTheOwners(t *testing.T) {
	tr := newTracker(Options{Interval: testInterval})
	fullHydration(tr, exA, 100, trackerT0)
	recs := duePublish(t, tr, trackerT0)
	for _, s := range []State{StateHydrating, StateFailed, StateRemoved, StateHydrated} {
		own(tr).set(exA, s)
		if got := statusOf(t, tr, exA).State; got != s {
			t.Fatalf("owner says %s, the tracker's status %s", s, got)
		}
	}
	// A tracker that restored a's record, whose owner has not taken a up.
	tr2 := NewTracker(Options{Interval: testInterval})
	tr2.Restore([]Record{recs[exA]})
	if got := statusOf(t, tr2, exA).State; got != StateHydrated {
		t.Fatalf("not taken up: the tracker's status says %s, want its last record's (hydrated)", got)
	}
	tr2.SetState(exA, StateFailed)
	if got := statusOf(t, tr2, exA).State; got != StateFailed {
		t.Fatalf("taken up as failed: the tracker's status says %s", got)
	}

	var fields []string
	typ := reflect.TypeFor[export]()
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Type == reflect.TypeFor[State]() {
			fields = append(fields, f.Name)
		}
	}
	if !slices.Equal(fields, []string{"lastState"}) {
		t.Fatalf("fields of type State in the tracker's export: %v, want only lastState (what its last record said)", fields)
	}
}

func statusOf(tb testing.TB, tr *Tracker, e change.ExportID) ExportStatus {
	tb.Helper()
	for _, s := range tr.Status() {
		if s.Export == e {
			return s
		}
	}
	tb.Fatalf("%s unknown to the tracker", e)
	return ExportStatus{}
}
