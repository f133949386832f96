package watermark

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

func mustEncode(t testing.TB, r Record) []byte {
	t.Helper()
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustEncodeQuiet(t testing.TB, q Quiet) []byte {
	t.Helper()
	b, err := EncodeQuiet(q)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestViewBusyAfterQuiet is the bug of issue 18: a quiet record moves T to 100, the next lists T
// as busy; T's own record says 50. T's watermark stays 100.
func TestViewBusyAfterQuiet(t *testing.T) {
	T := change.ExportID{Schema: "public", Table: "t"}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := &SnapshotInfo{Attempt: 1}
	v := NewView()
	for _, val := range [][]byte{
		mustEncode(t, Record{Export: T, Topic: "x.t", State: StateHydrated, Watermark: lsnp(50), Offsets: map[int32]int64{0: 10}, Snapshot: snap, Time: at}),
		mustEncodeQuiet(t, Quiet{Watermark: lsnp(100), Time: at}),
		mustEncodeQuiet(t, Quiet{Watermark: lsnp(120), Busy: []change.ExportID{T}, Time: at}),
	} {
		if _, err := v.Add(val); err != nil {
			t.Fatal(err)
		}
	}
	r, ok := v.Get(T)
	if !ok || r.Watermark == nil || *r.Watermark != 100 || *r.WatermarkLSN != 100 {
		t.Fatalf("watermark %v, want 0/64 (100): it moved backwards", r.Watermark)
	}
	// A new attempt starts again from its own records.
	if _, err := v.Add(mustEncode(t, Record{Export: T, Topic: "x.t", State: StateHydrating, Watermark: lsnp(60), Snapshot: &SnapshotInfo{Attempt: 2}, Time: at})); err != nil {
		t.Fatal(err)
	}
	if r, _ := v.Get(T); r.Watermark == nil || *r.Watermark != 60 {
		t.Fatalf("watermark after a new attempt %v, want 0/3C (60)", r.Watermark)
	}
	// TopicReader, for the restart, tells the same.
	rd := NewTopicReader()
	for _, val := range [][]byte{
		mustEncode(t, Record{Export: T, Topic: "x.t", State: StateHydrated, Watermark: lsnp(50), Snapshot: snap, Time: at}),
		mustEncodeQuiet(t, Quiet{Watermark: lsnp(100), Time: at}),
		mustEncodeQuiet(t, Quiet{Watermark: lsnp(120), Busy: []change.ExportID{T}, Time: at}),
	} {
		if err := rd.Add(0, val); err != nil {
			t.Fatal(err)
		}
	}
	recs, _ := rd.Result()
	if len(recs) != 1 || recs[0].Watermark == nil || *recs[0].Watermark != 100 {
		t.Fatalf("TopicReader: %+v, want watermark 100", recs)
	}
}

// TestViewNeverBackwards is the property: over arbitrary sequences of own, quiet and
// checkpoint records, no export's effective watermark moves backwards within an attempt, and it
// is never below its latest own record's.
func TestViewNeverBackwards(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	states := []State{StateHydrating, StateHydrated, StateHydrated, StateHydrated, StateRemoved, StateFailed}
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 18))
		es := make([]change.ExportID, 1+rng.IntN(4))
		for i := range es {
			es[i] = change.ExportID{Schema: "public", Table: fmt.Sprintf("t%d", i)}
		}
		type seen struct {
			attempt int
			w       *change.LSN
		}
		last := map[change.ExportID]seen{}
		own := map[change.ExportID]Record{}
		attempt := map[change.ExportID]int{}
		v := NewView()
		for i := range 300 {
			var val []byte
			switch k := rng.IntN(10); {
			case k < 5:
				e := es[rng.IntN(len(es))]
				if rng.IntN(15) == 0 {
					attempt[e]++
				}
				var w *change.LSN
				if rng.IntN(8) > 0 {
					w = lsnp(change.LSN(rng.IntN(1000)))
				}
				r := Record{Export: e, Topic: "x", State: states[rng.IntN(len(states))], Watermark: w, Time: at,
					Offsets: map[int32]int64{0: int64(i)}, Snapshot: &SnapshotInfo{Attempt: attempt[e]}}
				own[e] = r
				val = mustEncode(t, r)
			case k < 9:
				var busy []change.ExportID
				for _, e := range es {
					if rng.IntN(3) == 0 {
						busy = append(busy, e)
					}
				}
				var w *change.LSN
				if rng.IntN(8) > 0 {
					w = lsnp(change.LSN(rng.IntN(1000)))
				}
				val = mustEncodeQuiet(t, Quiet{Watermark: w, Busy: busy, Time: at})
			default:
				b, err := EncodeCheckpoint(change.LSN(rng.IntN(1000)), nil, at)
				if err != nil {
					t.Fatal(err)
				}
				val = b
			}
			if _, err := v.Add(val); err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				r, ok := v.Get(e)
				if !ok {
					continue
				}
				a := attemptOf(r)
				if p, ok := last[e]; ok && p.attempt == a && p.w != nil && (r.Watermark == nil || *r.Watermark < *p.w) {
					t.Fatalf("seed %d value %d: %s moved from %s to %v in attempt %d", seed, i, e, p.w, r.Watermark, a)
				}
				if o := own[e]; o.Watermark != nil && (r.Watermark == nil || *r.Watermark < *o.Watermark) {
					t.Fatalf("seed %d value %d: %s at %v, below its own record's %s", seed, i, e, r.Watermark, o.Watermark)
				}
				if r.Watermark != nil && (r.WatermarkLSN == nil || *r.WatermarkLSN != uint64(*r.Watermark)) {
					t.Fatalf("seed %d: watermark_lsn %v disagrees with %s", seed, r.WatermarkLSN, r.Watermark)
				}
				last[e] = seen{attempt: a, w: r.Watermark}
			}
		}
	}
}
