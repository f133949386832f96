package watermark

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// TestQuietRecordsDoNotGrowWithQuietExports runs 10 busy exports (their topics receive records
// before every Due) beside 10 and then 1,000 quiet ones for 20 simulated seconds, with the stream
// position moving at every Due. The records written per second must not grow with the quiet
// exports, and a reader (View) must see every quiet export's watermark follow the stream within
// Interval/4 plus one Due period.
func TestQuietRecordsDoNotGrowWithQuietExports(t *testing.T) {
	for _, mode := range []Mode{ModeIndependent, ModeGlobal} {
		perSecond := map[int]float64{}
		for _, quiet := range []int{10, 1000} {
			tr := newTracker(Options{Mode: mode, Interval: time.Second})
			ends := map[string]int64{}
			var ids []change.ExportID
			for i := range 10 + quiet {
				e := change.ExportID{Schema: "public", Table: fmt.Sprintf("t%04d", i)}
				ids = append(ids, e)
				fullHydration(tr, e, 100, trackerT0)
			}
			offsets := func(topic string) map[int32]int64 { return map[int32]int64{0: ends[topic]} }
			view := NewView()
			const tick = 100 * time.Millisecond
			var records int
			worst := time.Duration(0)
			pos := change.LSN(100)
			caughtUp := map[change.ExportID]time.Time{} // when the reader first saw pos
			for step := range 200 {
				now := trackerT0.Add(time.Duration(step) * tick)
				pos += 10
				tr.Advance(pos)
				for _, e := range ids[:10] {
					ends["p."+e.Table]++ // the busy topics receive records
				}
				var values [][]byte
				for _, r := range tr.Due(now, offsets) {
					b, err := Encode(r)
					if err != nil {
						t.Fatal(err)
					}
					values = append(values, b)
				}
				if q, ok := tr.Quiet(now); ok {
					b, err := EncodeQuiet(q)
					if err != nil {
						t.Fatal(err)
					}
					values = append(values, b)
				}
				tr.Published()
				if step >= 20 { // steady state: after the first two seconds
					records += len(values)
				}
				for _, v := range values {
					if _, err := view.Add(v); err != nil {
						t.Fatal(err)
					}
				}
				// Every quiet export's reader-visible watermark follows the stream.
				for _, e := range ids[10:] {
					r, _ := view.Get(e)
					if r.Watermark != nil && *r.Watermark >= pos-10 {
						if since, ok := caughtUp[e]; ok && step >= 20 {
							worst = max(worst, now.Sub(since))
						}
						caughtUp[e] = now
					}
				}
			}
			perSecond[quiet] = float64(records) / 18
			if worst > 500*time.Millisecond {
				t.Errorf("%s, %d quiet exports: a quiet export's watermark went %v without following the stream", mode, quiet, worst)
			}
			for _, e := range ids[10:] {
				if r, _ := view.Get(e); r.Watermark == nil || *r.Watermark < pos-40 {
					t.Errorf("%s, %d quiet exports: %s ends at watermark %s, the stream at %s", mode, quiet, e, fmtLSN(r.Watermark), pos)
					break
				}
			}
		}
		t.Logf("%s: %.1f records/s with 10 quiet exports, %.1f with 1,000 (10 busy)", mode, perSecond[10], perSecond[1000])
		if perSecond[1000] > perSecond[10]+1 || perSecond[1000] > 10*4+4 {
			t.Errorf("%s: %.1f records/s with 1,000 quiet exports against %.1f with 10: records grow with quiet tables", mode, perSecond[1000], perSecond[10])
		}
	}
}

func TestViewAppliesQuietRecordsInOrder(t *testing.T) {
	enc := func(r Record) []byte {
		b, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	encQ := func(w change.LSN, busy ...change.ExportID) []byte {
		b, err := EncodeQuiet(Quiet{Mode: ModeIndependent, Watermark: &w, Position: w, Busy: busy, Time: trackerT0})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	exC := change.ExportID{Schema: "public", Table: "c"}
	hyd := func(e change.ExportID, w change.LSN) Record {
		return Record{Export: e, Topic: "t." + e.Table, State: StateHydrated, Mode: ModeIndependent, Watermark: &w, Position: w,
			Offsets: map[int32]int64{0: 7}, Time: trackerT0}
	}
	cp, err := EncodeCheckpoint(500, nil, trackerT0)
	if err != nil {
		t.Fatal(err)
	}
	v := NewView()
	values := [][]byte{
		encQ(50), // before any own record: says nothing
		enc(hyd(exA, 100)),
		enc(hyd(exB, 100)),
		enc(Record{Export: exC, Topic: "t.c", State: StateHydrating, Mode: ModeIndependent, Time: trackerT0}),
		cp,
		encQ(300, exB), // speaks for a only: b is busy, c is not hydrated
	}
	for _, val := range values {
		if _, err := v.Add(val); err != nil {
			t.Fatal(err)
		}
	}
	want := map[change.ExportID]string{exA: "0/12C", exB: "0/64", exC: "null"}
	for e, w := range want {
		r, ok := v.Get(e)
		if !ok || fmtLSN(r.Watermark) != w {
			t.Errorf("%s: watermark %s, want %s", e, fmtLSN(r.Watermark), w)
		}
	}
	if r, _ := v.Get(exA); r.Offsets[0] != 7 || r.Position != 300 {
		t.Errorf("%s: offsets %v position %s; want its own record's offsets and the quiet position", exA, r.Offsets, r.Position)
	}
	// A newer own record of a is not raised by the older quiet record... unless lower.
	if _, err := v.Add(enc(hyd(exA, 310))); err != nil {
		t.Fatal(err)
	}
	if r, _ := v.Get(exA); fmtLSN(r.Watermark) != "0/136" {
		t.Errorf("%s after its own record: %s", exA, fmtLSN(r.Watermark))
	}
	// The restart reads the same through DecodeTopic.
	recs, gotCP, err := DecodeTopic(values)
	if err != nil || gotCP == nil || gotCP.Position != 500 {
		t.Fatalf("DecodeTopic: %v, checkpoint %+v", err, gotCP)
	}
	last := map[change.ExportID]Record{}
	for _, r := range recs {
		last[r.Export] = r
	}
	for e, w := range want {
		if fmtLSN(last[e].Watermark) != w {
			t.Errorf("DecodeTopic: %s watermark %s, want %s", e, fmtLSN(last[e].Watermark), w)
		}
	}
}
