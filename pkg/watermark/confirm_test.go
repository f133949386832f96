package watermark

import (
	"maps"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

func TestConfirmable(t *testing.T) {
	restoredA := Record{Version: 1, Export: exA, Topic: "p.a", State: StateHydrated, Watermark: lsnp(500), Position: 500, Time: trackerT0}
	tests := []struct {
		name   string
		run    func(tb testing.TB, tr *Tracker)
		want   change.LSN
		wantOK bool
	}{
		{"nothing known", func(tb testing.TB, tr *Tracker) {}, 0, false},
		{"nothing known while hydrating", func(tb testing.TB, tr *Tracker) { startSnap(tr, exA, 100, trackerT0) }, 0, false},
		{"no exports: the stream position", func(tb testing.TB, tr *Tracker) { tr.Advance(100) }, 100, true},
		{"a hydrating export pins nothing", func(tb testing.TB, tr *Tracker) {
			startSnap(tr, exA, 100, trackerT0)
			tr.Advance(300)
		}, 300, true},
		{"a hydrated export pins its position before any record", func(tb testing.TB, tr *Tracker) {
			tr.Advance(90)
			fullHydration(tr, exA, 100, trackerT0)
		}, 100, true},
		{"an in-flight record pins until it is durable", func(tb testing.TB, tr *Tracker) {
			fullHydration(tr, exA, 100, trackerT0)
			tr.Due(trackerT0, fakeEndOffsets) // position 100 in flight
			tr.Advance(300)
		}, 100, true},
		{"a durable record pins", func(tb testing.TB, tr *Tracker) {
			fullHydration(tr, exA, 100, trackerT0)
			duePublish(tb, tr, trackerT0)
			tr.Advance(300)
		}, 100, true},
		{"a newer durable record moves the pin", func(tb testing.TB, tr *Tracker) {
			fullHydration(tr, exA, 100, trackerT0)
			duePublish(tb, tr, trackerT0)
			tr.Advance(300)
			duePublish(tb, tr, trackerT0.Add(testInterval))
		}, 300, true},
		{"lowest over the hydrated exports", func(tb testing.TB, tr *Tracker) {
			fullHydration(tr, exA, 100, trackerT0)
			duePublish(tb, tr, trackerT0)
			tr.Advance(300)
			fullHydration(tr, exB, 300, trackerT0)
			duePublish(tb, tr, trackerT0.Add(testInterval/8)) // only exB's transition; exA stays at 100
		}, 100, true},
		{"a restored hydrated export pins its position", func(tb testing.TB, tr *Tracker) {
			tr.Restore([]Record{restoredA})
		}, 500, true},
		{"a restored hydrating export pins nothing", func(tb testing.TB, tr *Tracker) {
			tr.Restore([]Record{{Version: 1, Export: exA, State: StateHydrating, Time: trackerT0}})
			tr.Advance(70)
		}, 70, true},
		{"a re-snapshot pins until its hydrating record is durable", func(tb testing.TB, tr *Tracker) {
			tr.Restore([]Record{restoredA})
			tr.Advance(600)
			startSnap(tr, exA, 700, trackerT0)
			tr.Due(trackerT0, fakeEndOffsets)
		}, 500, true},
		{"a removed export pins until its removed record is durable", func(tb testing.TB, tr *Tracker) {
			tr.Restore([]Record{restoredA})
			tr.Advance(600)
			own(tr).Removed(exA, 650)
		}, 500, true},
		{"once the removed record is durable: the stream position", func(tb testing.TB, tr *Tracker) {
			tr.Restore([]Record{restoredA})
			tr.Advance(600)
			own(tr).Removed(exA, 650)
			duePublish(tb, tr, trackerT0)
		}, 600, true},
		{"never backwards", func(tb testing.TB, tr *Tracker) {
			tr.Restore([]Record{restoredA})
			if c, _ := tr.Confirmable(); c != 500 {
				tb.Fatalf("Confirmable = %s; want 0/1F4", c)
			}
			tr.Advance(300) // replay from the slot
			startSnap(tr, exA, 700, trackerT0)
			duePublish(tb, tr, trackerT0) // no hydrated export left; the stream is behind
		}, 500, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker(Options{Interval: testInterval})
			tt.run(t, tr)
			got, ok := tr.Confirmable()
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Confirmable() = %s, %v; want %s, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestTrackerRestore(t *testing.T) {
	rec := func(e change.ExportID, s State, w *change.LSN, pos change.LSN, attempt int) Record {
		r := Record{Version: 1, Export: e, Topic: "p." + e.Table, State: s, Mode: ModeIndependent, Watermark: w, Position: pos, Time: trackerT0}
		if attempt > 0 {
			r.Snapshot = &SnapshotInfo{Attempt: attempt}
		}
		return r
	}
	tr := newTracker(Options{Interval: testInterval})
	tr.Restore([]Record{
		rec(exA, StateHydrating, nil, 0, 1),
		rec(exB, StateHydrated, lsnp(400), 400, 2),
		rec(exA, StateHydrated, lsnp(300), 300, 1), // the last one of exA counts
		rec(exC, StateHydrating, lsnp(250), 0, 3),
	})

	if got, want := tr.Resume(), map[change.ExportID]change.LSN{exA: 300, exB: 400}; !maps.Equal(got, want) {
		t.Errorf("Resume() = %v; want %v", got, want)
	}
	st := tr.Status()
	if len(st) != 3 || st[2].Export != exC || !st[2].Restored || st[2].State != StateHydrating || st[2].Watermark != 250 {
		t.Fatalf("Status() = %+v", st)
	}

	// The stream replays from the slot, below the restored positions: nothing regresses, and a
	// restored hydrating export stays silent until it is hydrated again.
	tr.Advance(200)
	got := duePublish(t, tr, trackerT0.Add(testInterval))
	checkRecords(t, got, map[change.ExportID]wantRecord{
		exA: {StateHydrated, lsnp(300), 300},
		exB: {StateHydrated, lsnp(400), 400},
		exC: {},
	})

	// Its next attempt continues the numbering and keeps its old watermark.
	if n := startSnap(tr, exC, 900, trackerT0); n != 4 {
		t.Errorf("attempt after restored attempt 3 = %d; want 4", n)
	}
	tr.Advance(350)
	got = duePublish(t, tr, trackerT0.Add(2*testInterval))
	checkRecords(t, got, map[change.ExportID]wantRecord{
		exA: {StateHydrated, lsnp(350), 350},
		exB: {StateHydrated, lsnp(400), 400},
		exC: {StateHydrating, lsnp(250), 0},
	})
}

func TestTrackerRestoreAcrossModes(t *testing.T) {
	// Written in global mode: the watermark trails the position.
	recs := []Record{
		{Version: 1, Export: exA, Topic: "p.a", State: StateHydrated, Mode: ModeGlobal, Watermark: lsnp(200), Position: 500, Time: trackerT0},
		{Version: 1, Export: exB, Topic: "p.b", State: StateHydrated, Mode: ModeGlobal, Watermark: lsnp(200), Position: 250, Time: trackerT0},
	}
	tests := []struct {
		mode  Mode
		wants map[change.ExportID]wantRecord
	}{
		{ModeIndependent, map[change.ExportID]wantRecord{
			exA: {StateHydrated, lsnp(500), 500},
			exB: {StateHydrated, lsnp(250), 250},
		}},
		{ModeGlobal, map[change.ExportID]wantRecord{
			exA: {StateHydrated, lsnp(250), 500},
			exB: {StateHydrated, lsnp(250), 250},
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			tr := newTracker(Options{Mode: tt.mode, Interval: testInterval})
			tr.Restore(recs)
			if tr.Mode() != tt.mode {
				t.Errorf("Mode() = %s", tr.Mode())
			}
			checkRecords(t, duePublish(t, tr, trackerT0.Add(testInterval/4)), tt.wants)
		})
	}
}

func TestNewTrackerDefaults(t *testing.T) {
	tr := newTracker(Options{})
	if tr.Mode() != ModeIndependent {
		t.Errorf("default mode = %s", tr.Mode())
	}
	fullHydration(tr, exA, 100, trackerT0)
	duePublish(t, tr, trackerT0)
	if recs := tr.Due(trackerT0.Add(DefaultInterval-time.Nanosecond), nil); len(recs) != 0 {
		t.Errorf("heartbeat before the default interval: %+v", recs)
	}
	if recs := tr.Due(trackerT0.Add(DefaultInterval), nil); len(recs) != 1 {
		t.Errorf("no heartbeat after the default interval: %+v", recs)
	}
}

func TestTrackerStatus(t *testing.T) {
	tr := newTracker(Options{})
	tr.Advance(40)
	own(tr).StartHydration(exB, "p.b", 0x50, 1000, nil, trackerT0)
	tr.SnapshotRows(exB, 250)
	fullHydration(tr, exA, 0x60, trackerT0)
	tr.Advance(0x70)
	duePublish(t, tr, trackerT0)
	own(tr).Failed(exC, "no replication slot left")

	st := tr.Status()
	if len(st) != 3 {
		t.Fatalf("Status() has %d entries; want 3", len(st))
	}
	a, b, c := st[0], st[1], st[2]
	if a.Export != exA || a.State != StateHydrated || !a.HasPosition || a.Position != 0x70 || !a.HasWatermark || a.Watermark != 0x70 || a.DurablePosition != 0x70 {
		t.Errorf("exA: %+v", a)
	}
	if b.Export != exB || b.State != StateHydrating || b.HasPosition || b.HasWatermark || b.Attempt != 1 || b.RowsCopied != 250 || b.RowsEstimated != 1000 || b.C != 0x50 || !b.SnapshotStarted.Equal(trackerT0) || !b.SnapshotFinished.IsZero() {
		t.Errorf("exB: %+v", b)
	}
	if c.Export != exC || c.State != StateFailed || c.Err != "no replication slot left" || c.Attempt != 0 {
		t.Errorf("exC: %+v", c)
	}
}
