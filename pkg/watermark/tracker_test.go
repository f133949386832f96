package watermark

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

var (
	exA       = change.ExportID{Schema: "public", Table: "a"}
	exB       = change.ExportID{Schema: "public", Table: "b"}
	exC       = change.ExportID{Schema: "public", Table: "c"}
	trackerT0 = time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)
)

const testInterval = time.Second

// fakeEndOffsets is a stand-in for the sink's end offsets: one partition per topic.
func fakeEndOffsets(topic string) map[int32]int64 { return map[int32]int64{0: int64(len(topic))} }

// start begins a hydration of e at consistent point c with a topic named after e.
func startSnap(tr *Tracker, e change.ExportID, c change.LSN, now time.Time) int {
	return own(tr).StartHydration(e, "p."+e.Table, c, 100, map[int32]int64{0: 0}, now)
}

// hydrate takes e through a whole snapshot: start at c, copied, hydrated at c.
func fullHydration(tr *Tracker, e change.ExportID, c change.LSN, now time.Time) {
	startSnap(tr, e, c, now)
	tr.SnapshotRows(e, 100)
	tr.SnapshotCopied(e, now)
	own(tr).Hydrated(e, c)
}

// views keeps, per tracker under test, what a reader of its records knows.
var views = map[*Tracker]*View{}

// fromQuiet are the exports whose record in the last dueRecords came from the quiet record: one
// record speaks for many exports, so it is not coalesced per export.
var fromQuiet = map[change.ExportID]bool{}

// seedView gives tr's reader the records tr was restored from.
func seedView(tb testing.TB, tr *Tracker, recs []Record) {
	tb.Helper()
	v := NewView()
	for _, r := range recs {
		b, err := Encode(r)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := v.Add(b); err != nil {
			tb.Fatal(err)
		}
	}
	views[tr] = v
}

// dueRecords runs Due and then Quiet at now and returns what a reader learns from them: each
// own record, and the effective record (View) of every export the quiet record speaks for.
func dueRecords(tb testing.TB, tr *Tracker, now time.Time, offsets func(string) map[int32]int64) []Record {
	tb.Helper()
	v := views[tr]
	if v == nil {
		v = NewView()
		views[tr] = v
	}
	recs := tr.Due(now, offsets)
	out := append([]Record(nil), recs...)
	clear(fromQuiet)
	own(tr).checkRecords(tb, recs)
	for _, r := range recs {
		b, err := Encode(r)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := v.Add(b); err != nil {
			tb.Fatal(err)
		}
	}
	if q, ok := tr.Quiet(now); ok {
		b, err := EncodeQuiet(q)
		if err != nil {
			tb.Fatal(err)
		}
		changed, err := v.Add(b)
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range changed {
			r, _ := v.Get(e)
			out = append(out, r)
			fromQuiet[e] = true
		}
	}
	return out
}

// publish runs Due (and Quiet) at now, marks the records durable and returns what a reader
// learns, by export.
func duePublish(tb testing.TB, tr *Tracker, now time.Time) map[change.ExportID]Record {
	tb.Helper()
	recs := dueRecords(tb, tr, now, fakeEndOffsets)
	tr.Published()
	out := make(map[change.ExportID]Record, len(recs))
	for _, r := range recs {
		if _, dup := out[r.Export]; dup {
			tb.Fatalf("two records for %s in one Due", r.Export)
		}
		out[r.Export] = r
	}
	return out
}

// wantRecord describes the expected record of one export ("" state: no record at all).
type wantRecord struct {
	state State
	w     *change.LSN
	pos   change.LSN
}

func (w wantRecord) String() string {
	if w.state == "" {
		return "no record"
	}
	return fmt.Sprintf("%s watermark=%v position=%s", w.state, fmtLSN(w.w), w.pos)
}

func fmtLSN(l *change.LSN) string {
	if l == nil {
		return "null"
	}
	return l.String()
}

func checkRecords(tb testing.TB, got map[change.ExportID]Record, wants map[change.ExportID]wantRecord) {
	tb.Helper()
	for e, w := range wants {
		r, ok := got[e]
		switch {
		case w.state == "" && ok:
			tb.Errorf("%s: got a record (%s watermark=%s); want none", e, r.State, fmtLSN(r.Watermark))
		case w.state == "":
		case !ok:
			tb.Errorf("%s: no record; want %s", e, w)
		case r.State != w.state || !equalLSN(r.Watermark, w.w) || r.Position != w.pos:
			tb.Errorf("%s: got %s watermark=%s position=%s; want %s", e, r.State, fmtLSN(r.Watermark), r.Position, w)
		}
	}
}

func TestIndependentWatermarks(t *testing.T) {
	tests := []struct {
		name  string
		run   func(tb testing.TB, tr *Tracker) time.Time // returns the time of the final Due
		wants map[change.ExportID]wantRecord
	}{
		{
			name: "hydrated export follows the durable stream position",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				fullHydration(tr, exA, 100, trackerT0)
				tr.Advance(150)
				return trackerT0
			},
			wants: map[change.ExportID]wantRecord{exA: {StateHydrated, lsnp(150), 150}},
		},
		{
			name: "hydrated position is at least the hydration point",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				tr.Advance(90)
				fullHydration(tr, exA, 100, trackerT0)
				return trackerT0
			},
			wants: map[change.ExportID]wantRecord{exA: {StateHydrated, lsnp(100), 100}},
		},
		{
			name: "hydrating export has no watermark",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				tr.Advance(150)
				startSnap(tr, exA, 200, trackerT0)
				return trackerT0
			},
			wants: map[change.ExportID]wantRecord{exA: {StateHydrating, nil, 0}},
		},
		{
			name: "hydrated exports do not wait for a snapshot",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				fullHydration(tr, exA, 100, trackerT0)
				duePublish(tb, tr, trackerT0)
				startSnap(tr, exB, 200, trackerT0)
				tr.Advance(300)
				return trackerT0.Add(testInterval / 4)
			},
			wants: map[change.ExportID]wantRecord{
				exA: {StateHydrated, lsnp(300), 300},
				exB: {StateHydrating, nil, 0},
			},
		},
		{
			name: "a new attempt keeps the old watermark without advancing",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				fullHydration(tr, exA, 100, trackerT0)
				tr.Advance(150)
				duePublish(tb, tr, trackerT0)
				startSnap(tr, exA, 300, trackerT0)
				tr.Advance(400)
				return trackerT0.Add(time.Millisecond)
			},
			wants: map[change.ExportID]wantRecord{exA: {StateHydrating, lsnp(150), 0}},
		},
		{
			name: "a regressing stream position is ignored",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				fullHydration(tr, exA, 100, trackerT0)
				tr.Advance(200)
				tr.Advance(120)
				return trackerT0
			},
			wants: map[change.ExportID]wantRecord{exA: {StateHydrated, lsnp(200), 200}},
		},
		{
			name: "removed export ends at the removal point",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				fullHydration(tr, exA, 100, trackerT0)
				tr.Advance(200)
				duePublish(tb, tr, trackerT0)
				own(tr).Removed(exA, 250)
				tr.Advance(400)
				return trackerT0.Add(time.Millisecond)
			},
			wants: map[change.ExportID]wantRecord{exA: {StateRemoved, lsnp(250), 250}},
		},
		{
			name: "failed hydrated export keeps the position it reached",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				fullHydration(tr, exA, 100, trackerT0)
				tr.Advance(200)
				own(tr).Failed(exA, "boom")
				tr.Advance(400)
				return trackerT0
			},
			wants: map[change.ExportID]wantRecord{exA: {StateFailed, lsnp(200), 200}},
		},
		{
			name: "failed hydrating export has no watermark",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				startSnap(tr, exA, 100, trackerT0)
				own(tr).Failed(exA, "boom")
				return trackerT0
			},
			wants: map[change.ExportID]wantRecord{exA: {StateFailed, nil, 0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker(Options{Interval: testInterval})
			now := tt.run(t, tr)
			checkRecords(t, duePublish(t, tr, now), tt.wants)
		})
	}
}

func TestGlobalWatermarks(t *testing.T) {
	tests := []struct {
		name  string
		run   func(tb testing.TB, tr *Tracker) time.Time
		wants map[change.ExportID]wantRecord
	}{
		{
			name: "all exports publish the lowest own position",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				fullHydration(tr, exA, 100, trackerT0)
				tr.Advance(200)
				fullHydration(tr, exB, 300, trackerT0)
				return trackerT0
			},
			wants: map[change.ExportID]wantRecord{
				exA: {StateHydrated, lsnp(200), 200},
				exB: {StateHydrated, lsnp(200), 300},
			},
		},
		{
			name: "a hydrating export holds everyone back",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				fullHydration(tr, exA, 100, trackerT0)
				tr.Advance(200)
				duePublish(tb, tr, trackerT0)
				startSnap(tr, exB, 300, trackerT0)
				tr.Advance(500)
				return trackerT0.Add(testInterval)
			},
			wants: map[change.ExportID]wantRecord{
				exA: {StateHydrated, lsnp(200), 500},
				exB: {StateHydrating, nil, 0}, // no watermark while hydrating, in either mode
			},
		},
		{
			name: "everyone advances once the hydration is done",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				fullHydration(tr, exA, 100, trackerT0)
				tr.Advance(200)
				duePublish(tb, tr, trackerT0)
				startSnap(tr, exB, 300, trackerT0)
				tr.Advance(500)
				duePublish(tb, tr, trackerT0.Add(testInterval))
				tr.SnapshotCopied(exB, trackerT0)
				own(tr).Hydrated(exB, 500)
				tr.Advance(600)
				return trackerT0.Add(2 * testInterval)
			},
			wants: map[change.ExportID]wantRecord{
				exA: {StateHydrated, lsnp(600), 600},
				exB: {StateHydrated, lsnp(600), 600},
			},
		},
		{
			name: "failed and removed exports do not count",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				fullHydration(tr, exA, 100, trackerT0)
				startSnap(tr, exB, 150, trackerT0)
				startSnap(tr, exC, 160, trackerT0)
				duePublish(tb, tr, trackerT0)
				own(tr).Failed(exB, "boom")
				own(tr).Removed(exC, 170)
				tr.Advance(400)
				return trackerT0.Add(testInterval)
			},
			wants: map[change.ExportID]wantRecord{
				exA: {StateHydrated, lsnp(400), 400},
				exB: {StateFailed, nil, 0},
				exC: {StateRemoved, nil, 0},
			},
		},
		{
			name: "a higher value published before the switch is kept",
			run: func(tb testing.TB, tr *Tracker) time.Time {
				tr.Restore([]Record{
					{Version: 1, Export: exA, Topic: "p.a", State: StateHydrated, Mode: ModeIndependent, Watermark: lsnp(500), Position: 500, Time: trackerT0},
					{Version: 1, Export: exB, Topic: "p.b", State: StateHydrated, Mode: ModeIndependent, Watermark: lsnp(300), Position: 300, Time: trackerT0},
				})
				startSnap(tr, exC, 900, trackerT0)
				tr.Advance(350)
				return trackerT0.Add(testInterval)
			},
			wants: map[change.ExportID]wantRecord{
				exA: {StateHydrated, lsnp(500), 500},
				exB: {StateHydrated, lsnp(300), 350},
				exC: {StateHydrating, nil, 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker(Options{Mode: ModeGlobal, Interval: testInterval})
			now := tt.run(t, tr)
			checkRecords(t, duePublish(t, tr, now), tt.wants)
		})
	}
}

func TestDueSchedule(t *testing.T) {
	// Every case starts with exA hydrated at 100 and its first record published at trackerT0.
	tests := []struct {
		name  string
		run   func(tr *Tracker)
		at    time.Duration // time of the next Due, after trackerT0
		wants map[change.ExportID]wantRecord
	}{
		{"nothing moved: quiet", func(tr *Tracker) {}, testInterval - time.Nanosecond,
			map[change.ExportID]wantRecord{exA: {}}},
		{"nothing moved: heartbeat after the interval", func(tr *Tracker) {}, testInterval,
			map[change.ExportID]wantRecord{exA: {StateHydrated, lsnp(100), 100}}},
		{"moved: coalesced", func(tr *Tracker) { tr.Advance(200) }, testInterval/4 - time.Nanosecond,
			map[change.ExportID]wantRecord{exA: {}}},
		{"moved: published after a quarter interval", func(tr *Tracker) { tr.Advance(200) }, testInterval / 4,
			map[change.ExportID]wantRecord{exA: {StateHydrated, lsnp(200), 200}}},
		{"snapshot start at once", func(tr *Tracker) { startSnap(tr, exB, 200, trackerT0) }, 0,
			map[change.ExportID]wantRecord{exA: {}, exB: {StateHydrating, nil, 0}}},
		{"re-snapshot at once", func(tr *Tracker) { startSnap(tr, exA, 200, trackerT0) }, 0,
			map[change.ExportID]wantRecord{exA: {StateHydrating, lsnp(100), 0}}},
		{"removed at once", func(tr *Tracker) { own(tr).Removed(exA, 150) }, 0,
			map[change.ExportID]wantRecord{exA: {StateRemoved, lsnp(150), 150}}},
		{"failed at once", func(tr *Tracker) { own(tr).Failed(exA, "x") }, 0,
			map[change.ExportID]wantRecord{exA: {StateFailed, lsnp(100), 100}}},
		{"clock went back: heartbeat", func(tr *Tracker) {}, -time.Second,
			map[change.ExportID]wantRecord{exA: {StateHydrated, lsnp(100), 100}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker(Options{Interval: testInterval})
			fullHydration(tr, exA, 100, trackerT0)
			duePublish(t, tr, trackerT0)
			tt.run(tr)
			checkRecords(t, duePublish(t, tr, trackerT0.Add(tt.at)), tt.wants)
		})
	}
}

func TestDueTransitionsOfASnapshot(t *testing.T) {
	tr := newTracker(Options{Interval: testInterval})
	tr.Advance(50)
	steps := []struct {
		name string
		do   func()
		want wantRecord
	}{
		{"start", func() { startSnap(tr, exA, 100, trackerT0) }, wantRecord{StateHydrating, nil, 0}},
		{"rows are not a transition", func() { tr.SnapshotRows(exA, 7) }, wantRecord{}},
		{"copied", func() { tr.SnapshotCopied(exA, trackerT0) }, wantRecord{StateHydrating, nil, 0}},
		{"copied twice is not a transition", func() { tr.SnapshotCopied(exA, trackerT0) }, wantRecord{}},
		{"hydrated", func() { own(tr).Hydrated(exA, 120) }, wantRecord{StateHydrated, lsnp(120), 120}},
		{"removed", func() { own(tr).Removed(exA, 130) }, wantRecord{StateRemoved, lsnp(130), 130}},
		{"removed twice is ignored", func() { own(tr).Removed(exA, 140) }, wantRecord{}},
		{"no heartbeat once removed", func() {}, wantRecord{}},
	}
	now := trackerT0
	for _, s := range steps {
		s.do()
		now = now.Add(time.Millisecond) // well inside the coalescing period
		if s.name == "no heartbeat once removed" {
			now = now.Add(10 * testInterval)
		}
		got := duePublish(t, tr, now)
		checkRecords(t, got, map[change.ExportID]wantRecord{exA: s.want})
		if t.Failed() {
			t.Fatalf("after step %q", s.name)
		}
	}
}

func TestDueRecordContents(t *testing.T) {
	tr := newTracker(Options{Interval: testInterval})
	startOffsets := map[int32]int64{0: 5, 1: 6}
	if got := own(tr).StartHydration(exA, "p.a", 0x100, 1000, startOffsets, trackerT0); got != 1 {
		t.Fatalf("first attempt = %d; want 1", got)
	}
	startOffsets[0] = 99 // the tracker must have copied the map
	tr.SnapshotRows(exA, 300)
	tr.SnapshotRows(exA, 200)
	tr.SnapshotCopied(exA, trackerT0.Add(time.Minute))
	own(tr).Failed(exA, "column x: cannot encode")

	calls := 0
	recs := tr.Due(trackerT0.Add(2*time.Minute), func(topic string) map[int32]int64 {
		calls++
		if topic != "p.a" {
			t.Errorf("offsets asked for topic %q; want p.a", topic)
		}
		return map[int32]int64{0: 10, 1: 11}
	})
	if len(recs) != 1 || calls != 1 {
		t.Fatalf("got %d records, %d offsets calls; want 1, 1", len(recs), calls)
	}
	r := recs[0]
	snap := r.Snapshot
	switch {
	case r.Version != Version || r.Mode != ModeIndependent || r.Topic != "p.a":
		t.Errorf("header = %d %s %s", r.Version, r.Mode, r.Topic)
	case r.Error != "column x: cannot encode":
		t.Errorf("error = %q", r.Error)
	case !maps.Equal(r.Offsets, map[int32]int64{0: 10, 1: 11}):
		t.Errorf("offsets = %v", r.Offsets)
	case snap == nil:
		t.Fatal("no snapshot info")
	case snap.Attempt != 1 || snap.ConsistentPoint != 0x100 || snap.RowsCopied != 500 || snap.RowsEstimated != 1000:
		t.Errorf("snapshot = %+v", *snap)
	case !snap.StartedAt.Equal(trackerT0) || snap.FinishedAt == nil || !snap.FinishedAt.Equal(trackerT0.Add(time.Minute)):
		t.Errorf("snapshot times = %v, %v", snap.StartedAt, snap.FinishedAt)
	case !maps.Equal(snap.StartOffsets, map[int32]int64{0: 5, 1: 6}):
		t.Errorf("start offsets = %v", snap.StartOffsets)
	case !r.Time.Equal(trackerT0.Add(2 * time.Minute)):
		t.Errorf("ts = %v", r.Time)
	}
	// A returned record is the caller's: later progress does not change it.
	own(tr).StartHydration(exA, "p.a", 0x200, 1000, nil, trackerT0)
	tr.SnapshotRows(exA, 1)
	if snap.RowsCopied != 500 || snap.Attempt != 1 {
		t.Errorf("returned record changed under the caller: %+v", *snap)
	}
	// A nil offsets function is allowed.
	if recs := tr.Due(trackerT0.Add(3*time.Minute), nil); len(recs) != 1 || recs[0].Offsets != nil {
		t.Errorf("Due with nil offsets = %+v", recs)
	}
}

func TestReconcileFrom(t *testing.T) {
	off := func(o int64) map[int32]int64 { return map[int32]int64{0: o} }
	tests := []struct {
		name string
		run  func(tr *Tracker)
		want map[int32]int64
	}{
		{"first attempt: its own start", func(tr *Tracker) {}, off(10)},
		{"retry of an unfinished attempt: the earliest start", func(tr *Tracker) {
			own(tr).StartHydration(exA, "p.a", 1, 0, off(3), trackerT0)
			own(tr).StartHydration(exA, "p.a", 2, 0, off(6), trackerT0)
		}, off(3)},
		{"retry after a failed snapshot: the earliest start", func(tr *Tracker) {
			own(tr).StartHydration(exA, "p.a", 1, 0, off(3), trackerT0)
			own(tr).Failed(exA, "x")
		}, off(3)},
		{"after hydrated: its own start", func(tr *Tracker) {
			own(tr).StartHydration(exA, "p.a", 1, 0, off(3), trackerT0)
			own(tr).Hydrated(exA, 1)
		}, off(10)},
		{"after a failure of a hydrated export: its own start", func(tr *Tracker) {
			own(tr).StartHydration(exA, "p.a", 1, 0, off(3), trackerT0)
			own(tr).Hydrated(exA, 1)
			own(tr).Failed(exA, "x")
		}, off(10)},
		{"added again: from the beginning", func(tr *Tracker) {
			own(tr).StartHydration(exA, "p.a", 1, 0, off(3), trackerT0)
			own(tr).Hydrated(exA, 1)
			own(tr).Removed(exA, 2)
		}, map[int32]int64{}},
		{"restored unfinished attempt: its start", func(tr *Tracker) {
			tr.Restore([]Record{{Export: exA, State: StateHydrating, Snapshot: &SnapshotInfo{Attempt: 4, ReconcileFrom: off(2)}}})
		}, off(2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker(Options{})
			tt.run(tr)
			own(tr).StartHydration(exA, "p.a", 9, 0, off(10), trackerT0)
			recs := tr.Due(trackerT0, nil)
			if len(recs) != 1 || recs[0].Snapshot == nil {
				t.Fatalf("records = %+v", recs)
			}
			if got := recs[0].Snapshot.ReconcileFrom; !maps.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("reconcile_from = %v; want %v", got, tt.want)
			}
		})
	}
}
