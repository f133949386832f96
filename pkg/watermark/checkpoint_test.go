package watermark

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// commitBatch is what the pipeline does for one Kafka transaction: Advance for its stream units,
// Due, Checkpoint, and (when commit) Published. It returns the records and checkpoint that the
// transaction carries.
func commitBatch(tr *Tracker, end change.LSN, now time.Time, commit bool) ([]Record, *change.LSN) {
	if end != 0 {
		tr.Advance(end)
	}
	recs := tr.Due(now, fakeEndOffsets)
	var cp *change.LSN
	if lsn, ok := tr.Checkpoint(); ok {
		cp = &lsn
	}
	if commit {
		tr.Published()
	}
	return recs, cp
}

// TestCheckpointResumesPastCoalescedRecords is the crash that duplicated changes: transactions
// commit faster than watermark records are due, so the last record of an export lags what Kafka
// holds. The checkpoint in every transaction must carry the restart past all of it.
func TestCheckpointResumesPastCoalescedRecords(t *testing.T) {
	tr := newTracker(Options{Interval: testInterval})
	fullHydration(tr, exA, 100, trackerT0)
	fullHydration(tr, exB, 100, trackerT0)

	var durable []Record // records of committed transactions, in order
	var lastCP *change.LSN
	now := trackerT0
	for i := 1; i <= 20; i++ {
		now = now.Add(10 * time.Millisecond) // far below Interval/4: records are coalesced
		recs, cp := commitBatch(tr, change.LSN(100+i*10), now, true)
		durable = append(durable, recs...)
		if cp != nil {
			lastCP = cp
		}
	}
	// A transaction in flight when the process dies: not committed.
	commitBatch(tr, 1000, now.Add(10*time.Millisecond), false)

	lastRecord := map[change.ExportID]Record{}
	for _, r := range durable {
		lastRecord[r.Export] = r
	}
	if got := lastRecord[exA].Position; got >= 300 {
		t.Fatalf("test premise: the last record of %s should lag (coalescing), has position %s", exA, got)
	}
	if lastCP == nil || *lastCP != 300 {
		t.Fatalf("last committed checkpoint = %v, want 0/12C (every committed transaction's end)", lastCP)
	}

	restarted := newTracker(Options{Interval: testInterval})
	restarted.Restore(durable)
	restarted.RestoreCheckpoint(*lastCP)
	for e, p := range restarted.Resume() {
		if p != 300 {
			t.Errorf("resume %s at %s, want 0/12C: everything below is in Kafka and must not be produced again", e, p)
		}
	}
	if len(restarted.Resume()) != 2 {
		t.Errorf("resumed %d exports, want 2", len(restarted.Resume()))
	}
	if c, ok := restarted.Confirmable(); !ok || c > 300 {
		t.Errorf("confirmable after restart = %s, %v; want at most 0/12C", c, ok)
	}
}

// TestCheckpointDoesNotCoverHydratingExport: an export that starts hydrating again gets its
// hydrating record in the same transaction as the checkpoint that moves past it, so a restart
// never resumes it from the checkpoint (its held changes were not published).
func TestCheckpointDoesNotCoverHydratingExport(t *testing.T) {
	tr := newTracker(Options{Interval: testInterval})
	fullHydration(tr, exA, 100, trackerT0)
	fullHydration(tr, exB, 100, trackerT0)
	var durable []Record
	recs, _ := commitBatch(tr, 150, trackerT0, true)
	durable = append(durable, recs...)

	now := trackerT0.Add(time.Millisecond)
	startSnap(tr, exB, 160, now) // B's table is copied again; its changes are held from now on
	recs, cp := commitBatch(tr, 200, now, true)
	durable = append(durable, recs...)
	if cp == nil || *cp != 200 {
		t.Fatalf("checkpoint = %v, want 0/C8", cp)
	}

	restarted := newTracker(Options{Interval: testInterval})
	restarted.Restore(durable)
	restarted.RestoreCheckpoint(*cp)
	resume := restarted.Resume()
	if p, ok := resume[exA]; !ok || p != 200 {
		t.Errorf("resume %s = %s, %v; want 0/C8", exA, p, ok)
	}
	if p, ok := resume[exB]; ok {
		t.Errorf("hydrating %s resumes at %s; it must be snapshotted again", exB, p)
	}
}

// TestCheckpointPinsUntilPublished: the slot is never confirmed past a checkpoint that is not
// durable, nor past the lowest position a restart could resume an export from.
func TestCheckpointPinsUntilPublished(t *testing.T) {
	tr := newTracker(Options{Interval: testInterval})
	fullHydration(tr, exA, 100, trackerT0)
	commitBatch(tr, 150, trackerT0, true)
	c1, _ := tr.Confirmable()
	if c1 > 150 {
		t.Fatalf("confirmable %s past the durable checkpoint 0/96", c1)
	}
	// In flight: Advance and checkpoint returned, not published.
	tr.Advance(400)
	if _, ok := tr.Checkpoint(); !ok {
		t.Fatal("no checkpoint for a moved position")
	}
	if _, ok := tr.Checkpoint(); ok {
		t.Fatal("a second checkpoint for the same position")
	}
	c2, _ := tr.Confirmable()
	if c2 > 150 {
		t.Errorf("confirmable %s while the checkpoint 0/190 is in flight; a crash resumes at 0/96", c2)
	}
	tr.Published()
	if c3, _ := tr.Confirmable(); c3 != 400 {
		t.Errorf("confirmable %s after the checkpoint is durable, want 0/190", c3)
	}
}

func TestCheckpointEncodeDecode(t *testing.T) {
	v, err := EncodeCheckpoint(0x16B3748, nil, trackerT0)
	if err != nil {
		t.Fatal(err)
	}
	cp, ok, err := DecodeCheckpoint(v)
	if err != nil || !ok || cp.Position != 0x16B3748 || cp.Version != Version {
		t.Fatalf("DecodeCheckpoint(%s) = %+v, %v, %v", v, cp, ok, err)
	}
	// A watermark record is not a checkpoint; a checkpoint is not a watermark record.
	rec, err := Encode(Record{Export: exA, Topic: "p.a", State: StateHydrated, Time: trackerT0})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := DecodeCheckpoint(rec); ok {
		t.Errorf("watermark record %s decoded as a checkpoint", rec)
	}
	if _, err := Decode(v); err == nil {
		t.Errorf("checkpoint %s decoded as a watermark record", v)
	}
	cases := map[string]string{
		"newer version": `{"version":99,"kind":"checkpoint","position":"0/1","position_lsn":1}`,
		"no version":    `{"kind":"checkpoint","position":"0/1","position_lsn":1}`,
		"disagree":      `{"version":1,"kind":"checkpoint","position":"0/1","position_lsn":2}`,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			if _, ok, err := DecodeCheckpoint([]byte(in)); !ok || err == nil {
				t.Errorf("DecodeCheckpoint(%s) = ok %v, err %v; want an error", in, ok, err)
			}
		})
	}
	if _, _, err := DecodeCheckpoint([]byte(cases["newer version"])); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("newer version: %v, want ErrUnsupportedVersion", err)
	}
}

// TestCheckpointStopsAtHolding: an export whose changes the replication stage starts holding
// before its new snapshot exists (added again before its removal took effect) is hydrating from
// that moment on for the checkpoint, and its topic is reconciled from the beginning.
func TestCheckpointStopsAtHolding(t *testing.T) {
	tr := newTracker(Options{Interval: testInterval})
	fullHydration(tr, exA, 100, trackerT0)
	fullHydration(tr, exB, 100, trackerT0)
	var durable []Record
	recs, _ := commitBatch(tr, 150, trackerT0, true)
	durable = append(durable, recs...)

	own(tr).Holding(exB)
	recs, cp := commitBatch(tr, 300, trackerT0.Add(time.Millisecond), true)
	durable = append(durable, recs...)
	if cp == nil {
		t.Fatal("no checkpoint")
	}
	restarted := newTracker(Options{Interval: testInterval})
	restarted.Restore(durable)
	restarted.RestoreCheckpoint(*cp)
	resume := restarted.Resume()
	if p, ok := resume[exB]; ok {
		t.Errorf("%s resumes at %s, past changes that were held; it must be copied again", exB, p)
	}
	if resume[exA] != 300 {
		t.Errorf("%s resumes at %s, want 0/12C", exA, resume[exA])
	}
	own(tr).StartHydration(exB, "p.b", 310, 100, map[int32]int64{0: 50}, trackerT0.Add(2*time.Millisecond))
	if r, ok := tr.ReconcileRange(exB); !ok || len(r.From) != 0 || !r.Needed() {
		t.Errorf("reconcile of %s = %+v, %v; want from the beginning", exB, r, ok)
	}
}

// TestCheckpointPartial: a checkpoint naming a partly published transaction round-trips as
// version 2 (an older build, which would publish the transaction again from its start, refuses
// it), and one whose partial transaction does not follow its position is refused.
func TestCheckpointPartial(t *testing.T) {
	p := &change.Partial{Commit: 0x2000, Changes: 150000}
	v, err := EncodeCheckpoint(0x1F00, p, trackerT0)
	if err != nil {
		t.Fatal(err)
	}
	cp, ok, err := DecodeCheckpoint(v)
	if err != nil || !ok || cp.Version != 2 || cp.Partial == nil || *cp.Partial != *p || cp.Position != 0x1F00 {
		t.Fatalf("DecodeCheckpoint(%s) = %+v, %v, %v", v, cp, ok, err)
	}
	if v1, _ := EncodeCheckpoint(0x2100, nil, trackerT0); !bytes.Contains(v1, []byte(`"version":1`)) || bytes.Contains(v1, []byte("partial")) {
		t.Errorf("checkpoint without a partial transaction = %s, want version 1 and no partial", v1)
	}
	for name, in := range map[string]string{
		"below position": `{"version":2,"kind":"checkpoint","position":"0/2000","position_lsn":8192,"partial":{"commit":"0/1000","changes":5}}`,
		"no changes":     `{"version":2,"kind":"checkpoint","position":"0/1000","position_lsn":4096,"partial":{"commit":"0/2000","changes":0}}`,
	} {
		if _, ok, err := DecodeCheckpoint([]byte(in)); !ok || err == nil {
			t.Errorf("%s: DecodeCheckpoint(%s) = ok %v, err %v; want an error", name, in, ok, err)
		}
	}
}

// TestCheckpointOrigin: the timeline a checkpoint's positions were read on round-trips, stays
// version 1 (an addition older readers ignore), and is absent when unknown.
func TestCheckpointOrigin(t *testing.T) {
	for _, tc := range []struct {
		name   string
		origin Origin
		json   string
	}{
		{name: "unknown", origin: Origin{}, json: ""},
		{name: "timeline 1", origin: Origin{Timeline: 1}, json: `"timeline":1,`},
		{name: "promoted", origin: Origin{Timeline: 3, PromotedAt: 0x7FAE060}, json: `"timeline":3,"promoted_at":"0/7FAE060",`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := EncodeCheckpointOn(tc.origin, 0x8000000, nil, trackerT0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(v, []byte(`"version":1`)) || (tc.json != "" && !bytes.Contains(v, []byte(tc.json))) ||
				(tc.json == "" && bytes.Contains(v, []byte("timeline"))) {
				t.Errorf("EncodeCheckpointOn = %s, want version 1 with %q", v, tc.json)
			}
			cp, ok, err := DecodeCheckpoint(v)
			if err != nil || !ok || cp.Origin() != tc.origin {
				t.Errorf("DecodeCheckpoint(%s) = %+v (origin %v), %v, %v; want origin %v", v, cp, cp.Origin(), ok, err, tc.origin)
			}
		})
	}
}
